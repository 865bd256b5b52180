package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Signer declares one signer: the name requests use in spec.signerName, the
// CertificateAuthority it signs with, what it will put into a certificate,
// and how its requests get approved. Requests that break the policy get a
// Failed condition that names the rule, never a certificate.
//
// The object's name is the signer name with "/" replaced by ":" (for
// example "rekey.io:kube-apiserver-client"), which keeps signer names unique.
type Signer struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// spec declares the signer.
	Spec SignerSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`

	// status is the observed state of the signer.
	// +optional
	Status SignerStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// SignerSpec declares a signer.
type SignerSpec struct {
	// signerName is the name requests use in spec.signerName, "<domain>/<path>".
	// Immutable.
	SignerName string `json:"signerName" protobuf:"bytes,1,opt,name=signerName"`

	// certificateAuthorityRef names the rotation.rekey.io CertificateAuthority
	// whose key signs this signer's certificates. Immutable.
	CertificateAuthorityRef CertificateAuthorityReference `json:"certificateAuthorityRef" protobuf:"bytes,2,opt,name=certificateAuthorityRef"`

	// policy is what the signer will put into a certificate.
	Policy SignerPolicy `json:"policy" protobuf:"bytes,3,opt,name=policy"`

	// approval says how this signer's requests are approved.
	// +optional
	Approval SignerApproval `json:"approval,omitempty" protobuf:"bytes,4,opt,name=approval"`
}

// CertificateAuthorityReference names a rotation.rekey.io CertificateAuthority.
type CertificateAuthorityReference struct {
	// name of the CertificateAuthority.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
}

// SignerPolicy is what a signer will sign. The CA bit is never set.
type SignerPolicy struct {
	// allowedUsages are the usages a request may ask for; a request asking for
	// any other usage fails. Empty means any known usage.
	// +listType=atomic
	// +optional
	AllowedUsages []KeyUsage `json:"allowedUsages,omitempty" protobuf:"bytes,1,rep,name=allowedUsages,casttype=KeyUsage"`

	// requiredUsages must all be in a request's usages. Together with
	// allowedUsages equal to the same set, this demands an exact set.
	// +listType=atomic
	// +optional
	RequiredUsages []KeyUsage `json:"requiredUsages,omitempty" protobuf:"bytes,2,rep,name=requiredUsages,casttype=KeyUsage"`

	// defaultDuration is the lifetime of certificates whose request has no
	// expirationSeconds. Defaults to maxDuration.
	// +optional
	DefaultDuration *metav1.Duration `json:"defaultDuration,omitempty" protobuf:"bytes,3,opt,name=defaultDuration"`

	// maxDuration caps the lifetime: a certificate lives for the smaller of
	// the requested duration and maxDuration, and never past the CA's own
	// expiry. At least 10m.
	MaxDuration metav1.Duration `json:"maxDuration" protobuf:"bytes,4,opt,name=maxDuration"`

	// subject restricts the subject of requests.
	// +optional
	Subject SubjectPolicy `json:"subject,omitempty" protobuf:"bytes,5,opt,name=subject"`

	// subjectAltNames restricts subject alternative names.
	// +optional
	SubjectAltNames SubjectAltNamePolicy `json:"subjectAltNames,omitempty" protobuf:"bytes,6,opt,name=subjectAltNames"`
}

// SubjectPolicy restricts the subject of requests.
type SubjectPolicy struct {
	// commonNamePrefix, when set, must start the subject common name, and the
	// common name must be longer than it.
	// +optional
	CommonNamePrefix string `json:"commonNamePrefix,omitempty" protobuf:"bytes,1,opt,name=commonNamePrefix"`

	// organizations, when set, must be exactly the subject organizations
	// (in any order).
	// +listType=atomic
	// +optional
	Organizations []string `json:"organizations,omitempty" protobuf:"bytes,2,rep,name=organizations"`

	// forbiddenOrganizations may not appear among the subject organizations.
	// +listType=atomic
	// +optional
	ForbiddenOrganizations []string `json:"forbiddenOrganizations,omitempty" protobuf:"bytes,3,rep,name=forbiddenOrganizations"`

	// commonNameIsRequester requires the subject common name to be the
	// requesting user's name (spec.username, set by the server from the
	// authenticated user): a node may then only get a certificate in its
	// own name.
	// +optional
	CommonNameIsRequester bool `json:"commonNameIsRequester,omitempty" protobuf:"varint,4,opt,name=commonNameIsRequester"`

	// forbidOtherAttributes refuses subject attributes other than the common
	// name and organizations (OU, country, locality, serial number and the
	// rest), so that the certificate says nothing the policy did not check.
	// +optional
	ForbidOtherAttributes bool `json:"forbidOtherAttributes,omitempty" protobuf:"varint,5,opt,name=forbidOtherAttributes"`
}

// SubjectAltNameType is a kind of subject alternative name: DNS, IP, Email or URI.
// +enum
type SubjectAltNameType string

// Subject alternative name types.
const (
	SANTypeDNS   SubjectAltNameType = "DNS"
	SANTypeIP    SubjectAltNameType = "IP"
	SANTypeEmail SubjectAltNameType = "Email"
	SANTypeURI   SubjectAltNameType = "URI"
)

// SubjectAltNamePolicy restricts subject alternative names. Extensions
// other than subject alternative names in a request are ignored.
type SubjectAltNamePolicy struct {
	// allowed are the SAN types a request may carry; a request with any other
	// type fails. Empty means none.
	// +listType=atomic
	// +optional
	Allowed []SubjectAltNameType `json:"allowed,omitempty" protobuf:"bytes,1,rep,name=allowed,casttype=SubjectAltNameType"`

	// requireDNSOrIP demands at least one DNS or IP SAN.
	// +optional
	RequireDNSOrIP bool `json:"requireDNSOrIP,omitempty" protobuf:"varint,2,opt,name=requireDNSOrIP"`

	// allowWildcardDNSNames lets DNS names contain a '*' label. Off by
	// default: a wildcard name stands for every host of a domain.
	// +optional
	AllowWildcardDNSNames bool `json:"allowWildcardDNSNames,omitempty" protobuf:"varint,3,opt,name=allowWildcardDNSNames"`
}

// ApprovalMode says who approves a signer's requests: Manual (people or
// external controllers through /approval), NodeClient (rekey approves node
// client certificate requests the requester is authorized for by a
// SubjectAccessReview), NodeServing (rekey approves a node's serving
// certificate request whose addresses are its Node's, in the host
// cluster), or Attestation (approval gated by TPM attestation).
// +enum
type ApprovalMode string

// Approval modes.
const (
	ApprovalManual      ApprovalMode = "Manual"
	ApprovalNodeClient  ApprovalMode = "NodeClient"
	ApprovalNodeServing ApprovalMode = "NodeServing"
	ApprovalAttestation ApprovalMode = "Attestation"
)

// SignerApproval says how requests get approved.
type SignerApproval struct {
	// mode is Manual (default), NodeClient, NodeServing or Attestation.
	// +optional
	Mode ApprovalMode `json:"mode,omitempty" protobuf:"bytes,1,opt,name=mode,casttype=ApprovalMode"`

	// nodeServing narrows NodeServing approval further; only with mode
	// NodeServing.
	// +optional
	NodeServing *NodeServingApproval `json:"nodeServing,omitempty" protobuf:"bytes,2,opt,name=nodeServing"`
}

// NodeServingApproval are allow-lists a node's serving certificate's
// addresses must also be in (besides being its Node's).
type NodeServingApproval struct {
	// allowedDNSSuffixes: every DNS name must end with one of these (for
	// example ".nodes.example.com"); empty allows any of the Node's names.
	// +listType=atomic
	// +optional
	AllowedDNSSuffixes []string `json:"allowedDNSSuffixes,omitempty" protobuf:"bytes,1,rep,name=allowedDNSSuffixes"`
	// allowedIPPrefixes: every IP address must be in one of these CIDR
	// prefixes (for example "10.0.0.0/8"); empty allows any of the Node's
	// addresses.
	// +listType=atomic
	// +optional
	AllowedIPPrefixes []string `json:"allowedIPPrefixes,omitempty" protobuf:"bytes,2,rep,name=allowedIPPrefixes"`
}

// SignerStatus is the observed state of a signer.
type SignerStatus struct {
	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`

	// conditions: Ready is True when the CA key can be reached and the
	// signer is signing; its reason says why not otherwise.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,2,rep,name=conditions"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// SignerList is a list of Signers.
type SignerList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// items are the signers.
	Items []Signer `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// SignerReady is the condition type saying the signer can sign.
const SignerReady = "Ready"
