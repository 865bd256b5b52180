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

	// hostCluster makes the signer also serve the host cluster's own
	// certificates.k8s.io/v1 APIs for spec.signerName: CertificateSigningRequests
	// (a stock kubelet's, kubectl certificate approve) and PodCertificateRequests.
	// Setting it needs the verbs sign (and, when approval is automatic,
	// approve) on certificates.k8s.io signers for spec.signerName in the
	// host cluster.
	// +optional
	HostCluster *HostClusterServing `json:"hostCluster,omitempty" protobuf:"bytes,5,opt,name=hostCluster"`
}

// HostClusterServing says which of the host cluster's own certificate APIs
// (certificates.k8s.io/v1) a signer also serves for its signer name.
type HostClusterServing struct {
	// certificateSigningRequests: rekey approves (under approval.mode:
	// Manual leaves it to kubectl certificate approve; NodeClient and
	// NodeServing as for rekey's own requests; Attestation is not allowed)
	// and signs, under spec.policy, the host cluster's
	// CertificateSigningRequests of spec.signerName.
	// +optional
	CertificateSigningRequests bool `json:"certificateSigningRequests,omitempty" protobuf:"varint,1,opt,name=certificateSigningRequests"`

	// podCertificateRequests: rekey issues, under this policy and
	// spec.policy, the host cluster's PodCertificateRequests of
	// spec.signerName. Not for kubernetes.io signer names.
	// +optional
	PodCertificateRequests *PodCertificatePolicy `json:"podCertificateRequests,omitempty" protobuf:"bytes,2,opt,name=podCertificateRequests"`
}

// PodCertificatePolicy says which pods get a certificate and what it
// holds. Templates (commonName, dnsNames) may use $(namespace),
// $(serviceAccount), $(podName) and $(nodeName).
type PodCertificatePolicy struct {
	// allowed lists the service accounts whose pods may get a certificate
	// (1 to 64 entries); a pod of any other is Denied (reason
	// NotAllowed).
	// +listType=atomic
	Allowed []PodCertificateSubjects `json:"allowed" protobuf:"bytes,1,rep,name=allowed"`

	// spiffeTrustDomain, when set, puts the URI SAN
	// spiffe://<spiffeTrustDomain>/ns/<namespace>/sa/<serviceAccount>
	// into every certificate.
	// +optional
	SPIFFETrustDomain string `json:"spiffeTrustDomain,omitempty" protobuf:"bytes,2,opt,name=spiffeTrustDomain"`

	// commonName is the subject common name's template; empty leaves the
	// subject empty.
	// +optional
	CommonName string `json:"commonName,omitempty" protobuf:"bytes,3,opt,name=commonName"`

	// dnsNames are DNS SAN templates (at most 16), such as
	// "$(serviceAccount).$(namespace).svc".
	// +listType=atomic
	// +optional
	DNSNames []string `json:"dnsNames,omitempty" protobuf:"bytes,4,rep,name=dnsNames"`

	// keyTypes the signer accepts (RSA3072, RSA4096, ECDSAP256, ECDSAP384,
	// ECDSAP521, ED25519); empty accepts all of them. Another is Denied
	// (reason UnsupportedKeyType).
	// +listType=atomic
	// +optional
	KeyTypes []PodCertificateKeyType `json:"keyTypes,omitempty" protobuf:"bytes,5,rep,name=keyTypes,casttype=PodCertificateKeyType"`

	// usages of the certificates; default digital signature, client auth
	// and server auth. Each must be allowed by spec.policy.allowedUsages.
	// +listType=atomic
	// +optional
	Usages []KeyUsage `json:"usages,omitempty" protobuf:"bytes,6,rep,name=usages,casttype=KeyUsage"`

	// duration of the certificates, at least 1h; default 24h. Never longer
	// than the request's maxExpirationSeconds or spec.policy.maxDuration.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty" protobuf:"bytes,7,opt,name=duration"`
}

// PodCertificateSubjects are service accounts of a namespace.
type PodCertificateSubjects struct {
	// namespace is a namespace name, or "*" for every namespace.
	Namespace string `json:"namespace" protobuf:"bytes,1,opt,name=namespace"`
	// serviceAccounts are names in that namespace (at most 64); empty or
	// "*" allows every service account there.
	// +listType=atomic
	// +optional
	ServiceAccounts []string `json:"serviceAccounts,omitempty" protobuf:"bytes,2,rep,name=serviceAccounts"`
}

// PodCertificateKeyType is a key type of a podCertificate projected volume.
// +enum
type PodCertificateKeyType string

// Key types kube-apiserver accepts in a PodCertificateRequest.
const (
	PodCertificateKeyRSA3072   PodCertificateKeyType = "RSA3072"
	PodCertificateKeyRSA4096   PodCertificateKeyType = "RSA4096"
	PodCertificateKeyECDSAP256 PodCertificateKeyType = "ECDSAP256"
	PodCertificateKeyECDSAP384 PodCertificateKeyType = "ECDSAP384"
	PodCertificateKeyECDSAP521 PodCertificateKeyType = "ECDSAP521"
	PodCertificateKeyED25519   PodCertificateKeyType = "ED25519"
)

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

	// crlDistributionPoints are URLs (http or https, at most 4) put into
	// every certificate the signer issues as its CRL distribution points.
	// "$(caName)" and "$(keyID)" in a URL are replaced by the issuing
	// CertificateAuthority's name and its signing key's ID, so that
	// "https://<rekey>/crl/$(caName)/$(keyID)" names the CRL rekey serves
	// for exactly the key that signed the certificate (during a rotation
	// the previous key's certificates are listed in the previous key's CRL).
	// +listType=atomic
	// +optional
	CRLDistributionPoints []string `json:"crlDistributionPoints,omitempty" protobuf:"bytes,7,rep,name=crlDistributionPoints"`
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
