package certificates

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// CertificateSigningRequest asks a named signer for an X.509 certificate.
type CertificateSigningRequest struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	// Spec is immutable after creation; the requester identity in it is
	// stamped by the server.
	Spec CertificateSigningRequestSpec
	// Status is written through the /approval and /status subresources only.
	Status CertificateSigningRequestStatus
}

// CertificateSigningRequestSpec is the request and who made it.
type CertificateSigningRequestSpec struct {
	// Request is a PEM-encoded PKCS#10 certificate request.
	Request []byte
	// SignerName is the qualified name of the signer asked to sign.
	SignerName string
	// ExpirationSeconds is the requested certificate lifetime.
	ExpirationSeconds *int32
	// Usages are the requested key usages and extended key usages.
	Usages []KeyUsage

	// Username, UID, Groups and Extra describe the authenticated requester.
	Username string
	UID      string
	Groups   []string
	Extra    map[string]ExtraValue
}

// ExtraValue holds the values of one extra user attribute.
type ExtraValue []string

// CertificateSigningRequestStatus holds approval, failure and the issued certificate.
type CertificateSigningRequestStatus struct {
	Conditions  []CertificateSigningRequestCondition
	Certificate []byte
}

// RequestConditionType is the type of a CertificateSigningRequest condition.
type RequestConditionType string

// Well-known condition types.
const (
	CertificateApproved RequestConditionType = "Approved"
	CertificateDenied   RequestConditionType = "Denied"
	CertificateFailed   RequestConditionType = "Failed"
	// CertificateAttested records, at create, what a signer in Attestation
	// mode verified of the request's TPM evidence (True), or why it was
	// refused (False). Only the server adds it; no update may add, change
	// or remove it.
	CertificateAttested RequestConditionType = "Attested"
	// CertificateRevoked: a Revocation names the issued certificate (server-set).
	CertificateRevoked RequestConditionType = "Revoked"
	// CertificateIssued: status.certificate is set (server-set in the
	// write that sets it; no client adds or removes it).
	CertificateIssued RequestConditionType = "Issued"
)

// CertificateSigningRequestCondition describes one condition of a request.
type CertificateSigningRequestCondition struct {
	Type               RequestConditionType
	Status             metav1.ConditionStatus
	Reason             string
	Message            string
	LastUpdateTime     metav1.Time
	LastTransitionTime metav1.Time
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// CertificateSigningRequestList is a list of CertificateSigningRequests.
type CertificateSigningRequestList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []CertificateSigningRequest
}

// KeyUsage is a key usage or extended key usage, named as in RFC 5280.
type KeyUsage string

// Known key usages; the same set as certificates.k8s.io/v1.
const (
	UsageSigning           KeyUsage = "signing"
	UsageDigitalSignature  KeyUsage = "digital signature"
	UsageContentCommitment KeyUsage = "content commitment"
	UsageKeyEncipherment   KeyUsage = "key encipherment"
	UsageKeyAgreement      KeyUsage = "key agreement"
	UsageDataEncipherment  KeyUsage = "data encipherment"
	UsageCertSign          KeyUsage = "cert sign"
	UsageCRLSign           KeyUsage = "crl sign"
	UsageEncipherOnly      KeyUsage = "encipher only"
	UsageDecipherOnly      KeyUsage = "decipher only"
	UsageAny               KeyUsage = "any"
	UsageServerAuth        KeyUsage = "server auth"
	UsageClientAuth        KeyUsage = "client auth"
	UsageCodeSigning       KeyUsage = "code signing"
	UsageEmailProtection   KeyUsage = "email protection"
	UsageSMIME             KeyUsage = "s/mime"
	UsageIPsecEndSystem    KeyUsage = "ipsec end system"
	UsageIPsecTunnel       KeyUsage = "ipsec tunnel"
	UsageIPsecUser         KeyUsage = "ipsec user"
	UsageTimestamping      KeyUsage = "timestamping"
	UsageOCSPSigning       KeyUsage = "ocsp signing"
	UsageMicrosoftSGC      KeyUsage = "microsoft sgc"
	UsageNetscapeSGC       KeyUsage = "netscape sgc"
)

// Built-in signer names (ARCHITECTURE.md).
const (
	KubeAPIServerClientSignerName        = "rekey.io/kube-apiserver-client"
	KubeAPIServerClientKubeletSignerName = "rekey.io/kube-apiserver-client-kubelet"
	KubeletServingSignerName             = "rekey.io/kubelet-serving"
	KubeAPIServerClientKubeletTPMSigner  = "rekey.io/kube-apiserver-client-kubelet-tpm"
	KubeletServingTPMSignerName          = "rekey.io/kubelet-serving-tpm"
	InsecureTestSignerName               = "rekey.io/insecure-test"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Signer declares one signer, the CA it signs with, and its policy.
type Signer struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   SignerSpec
	Status SignerStatus
}

// SignerSpec is the declared behaviour of a signer.
type SignerSpec struct {
	SignerName              string
	CertificateAuthorityRef CertificateAuthorityReference
	Policy                  SignerPolicy
	Approval                SignerApproval
	HostCluster             *HostClusterServing
}

// HostClusterServing says which of the host cluster's own certificate APIs
// (certificates.k8s.io/v1) a signer also serves for its signer name.
type HostClusterServing struct {
	CertificateSigningRequests bool
	PodCertificateRequests     *PodCertificatePolicy
}

// PodCertificatePolicy says which pods get a certificate and what it holds.
type PodCertificatePolicy struct {
	Allowed           []PodCertificateSubjects
	SPIFFETrustDomain string
	CommonName        string
	DNSNames          []string
	KeyTypes          []PodCertificateKeyType
	Usages            []KeyUsage
	Duration          *metav1.Duration
}

// PodCertificateSubjects are service accounts of a namespace.
type PodCertificateSubjects struct {
	Namespace       string
	ServiceAccounts []string
}

// PodCertificateKeyType is a key type of a podCertificate projected volume.
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
	Name string
}

// SignerPolicy is what a signer will put into a certificate.
type SignerPolicy struct {
	AllowedUsages   []KeyUsage
	RequiredUsages  []KeyUsage
	DefaultDuration *metav1.Duration
	MaxDuration     metav1.Duration
	Subject         SubjectPolicy
	SubjectAltNames SubjectAltNamePolicy
	// CRLDistributionPoints: URL templates ($(caName), $(keyID)) put into
	// issued certificates.
	CRLDistributionPoints []string
}

// SubjectPolicy restricts the subject of requests.
type SubjectPolicy struct {
	CommonNamePrefix       string
	Organizations          []string
	ForbiddenOrganizations []string
	CommonNameIsRequester  bool
	ForbidOtherAttributes  bool
}

// SubjectAltNameType is a kind of subject alternative name.
type SubjectAltNameType string

// Subject alternative name types.
const (
	SANTypeDNS   SubjectAltNameType = "DNS"
	SANTypeIP    SubjectAltNameType = "IP"
	SANTypeEmail SubjectAltNameType = "Email"
	SANTypeURI   SubjectAltNameType = "URI"
)

// SubjectAltNamePolicy restricts subject alternative names.
type SubjectAltNamePolicy struct {
	Allowed               []SubjectAltNameType
	RequireDNSOrIP        bool
	AllowWildcardDNSNames bool
}

// ApprovalMode says who approves a signer's requests.
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
	Mode        ApprovalMode
	NodeServing *NodeServingApproval
}

// NodeServingApproval are allow-lists for NodeServing approval.
type NodeServingApproval struct {
	AllowedDNSSuffixes []string
	AllowedIPPrefixes  []string
}

// SignerStatus is observed state of a signer.
type SignerStatus struct {
	ObservedGeneration int64
	Conditions         []metav1.Condition
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// SignerList is a list of Signers.
type SignerList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []Signer
}

// SignerReady is the condition type saying the signer can sign.
const SignerReady = "Ready"
