package attestation

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// AttestationPolicy says which TPMs may attest for which signers: the EKs
// it trusts (by certificate root or by key), the PCRs a quote must cover
// and their values, and the limits of a challenge.
type AttestationPolicy struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec AttestationPolicySpec
}

// PCRMode says where the expected PCR values come from.
type PCRMode string

// PCR modes.
const (
	// PCRModeFixed: the values in the policy.
	PCRModeFixed PCRMode = "Fixed"
	// PCRModeTrustOnFirstUse: the values of the node's first successful
	// attestation, recorded then and required from then on.
	PCRModeTrustOnFirstUse PCRMode = "TrustOnFirstUse"
)

// AttestationPolicySpec declares a policy.
type AttestationPolicySpec struct {
	// ekRootCertificates is a PEM bundle of the CA certificates whose EK
	// certificates are trusted (the TPM vendors' roots).
	EKRootCertificates string
	// ekIntermediateCertificates is a PEM bundle of intermediate CAs
	// between those roots and EK certificates.
	EKIntermediateCertificates string
	// allowedEKPublicKeyHashes are hex SHA-256 hashes of EK public keys (DER
	// SubjectPublicKeyInfo) trusted without a certificate.
	AllowedEKPublicKeyHashes []string
	// pcrPolicy is the PCR selection a quote must cover exactly, and where its
	// values come from.
	PCRPolicy PCRPolicy
	// signerNames are the signers whose Attestation approval this policy
	// gates.
	SignerNames []string
	// challengeLifetime is how long a challenge may be answered (default 5m).
	ChallengeLifetime *metav1.Duration
	// maxAttemptsPerEKPerHour bounds the challenges one EK may ask for in an
	// hour (default 10).
	MaxAttemptsPerEKPerHour *int32
}

// PCRPolicy is the PCRs of a quote.
type PCRPolicy struct {
	// bank is the PCR bank: sha256 (the default and only one supported).
	Bank string
	// mode is Fixed or TrustOnFirstUse (default).
	Mode PCRMode
	// selection is the exact set of PCR indexes (0-23) a quote must cover.
	Selection []int32
	// values are the expected values in mode Fixed, one per selected index.
	Values []PCRValue
}

// PCRValue is an expected PCR value.
type PCRValue struct {
	// index is the PCR index.
	Index int32
	// value is the PCR value in hex (64 characters for sha256).
	Value string
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// AttestationPolicyList is a list of AttestationPolicies.
type AttestationPolicyList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []AttestationPolicy
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeAttestation is a node's TPM attestation, named after the node: the
// node posts its EK and AK in spec; rekey checks them, answers with a
// credential-activation challenge in status, and records there what it
// verified when a certificate request answers the challenge.
type NodeAttestation struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   NodeAttestationSpec
	Status NodeAttestationStatus
}

// NodeAttestationSpec is what the node's agent reads from its TPM.
type NodeAttestationSpec struct {
	// policyName is the AttestationPolicy to attest under.
	PolicyName string
	// ekCertificate is the EK certificate (DER) from the TPM's NV storage;
	// optional when the policy allows the EK by its key hash.
	EKCertificate []byte
	// ekPublic is the EK's public area (TPMT_PUBLIC).
	EKPublic []byte
	// akPublic is the attestation key's public area (TPMT_PUBLIC).
	AKPublic []byte
}

// NodeAttestationPhase is where an attestation is.
type NodeAttestationPhase string

// Phases.
const (
	// NodeAttestationChallenged: a challenge waits for a certificate request.
	NodeAttestationChallenged NodeAttestationPhase = "Challenged"
	// NodeAttestationAttested: the last request answered it.
	NodeAttestationAttested NodeAttestationPhase = "Attested"
	// NodeAttestationRefused: the EK, the AK or the evidence was refused;
	// the Ready condition says why.
	NodeAttestationRefused NodeAttestationPhase = "Refused"
)

// NodeAttestationStatus is written by rekey only.
type NodeAttestationStatus struct {
	// phase is Challenged, Attested or Refused.
	Phase NodeAttestationPhase
	// challenge is the outstanding credential-activation challenge.
	Challenge *AttestationChallenge
	// ekFingerprint is the hex SHA-256 of the EK's public key.
	EKFingerprint string
	// boundNode is the node the EK is bound to (on its first success).
	BoundNode string
	// lastAttested is what the last successful attestation verified.
	LastAttested *AttestedRecord
	// conditions: Ready (reason says why not).
	Conditions []metav1.Condition
}

// AttestationChallenge is TPM2_MakeCredential's output for the node's EK
// and AK; only that TPM can recover the secret.
type AttestationChallenge struct {
	CredentialBlob  []byte
	EncryptedSecret []byte
	ExpirationTime  metav1.Time
	// PCRSelection is the exact set of sha256 PCRs the node must quote.
	PCRSelection []int32
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ChallengeRequest asks for a fresh challenge for a NodeAttestation's spec.
type ChallengeRequest struct {
	metav1.TypeMeta
	metav1.ObjectMeta
}

// AttestedRecord is what an attestation verified.
type AttestedRecord struct {
	Time       metav1.Time
	PolicyName string
	PCRIndexes []int32
	// firstUse is true when this attestation bound the EK to the node.
	FirstUse bool
	// request is the certificate signing request it approved.
	Request string
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeAttestationList is a list of NodeAttestations.
type NodeAttestationList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []NodeAttestation
}
