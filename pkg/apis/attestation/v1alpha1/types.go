package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// AttestationPolicy says which TPMs may attest for which signers: the EKs
// it trusts (by certificate root or by key), the PCRs a quote must cover
// and their values, and the limits of a challenge.
type AttestationPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Spec AttestationPolicySpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`
}

// PCRMode says where the expected PCR values come from.
// +enum
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
	// +optional
	EKRootCertificates string `json:"ekRootCertificates,omitempty" protobuf:"bytes,1,opt,name=ekRootCertificates"`
	// ekIntermediateCertificates is a PEM bundle of intermediate CAs
	// between those roots and EK certificates.
	// +optional
	EKIntermediateCertificates string `json:"ekIntermediateCertificates,omitempty" protobuf:"bytes,2,opt,name=ekIntermediateCertificates"`
	// allowedEKPublicKeyHashes are hex SHA-256 hashes of EK public keys (DER
	// SubjectPublicKeyInfo) trusted without a certificate.
	// +optional
	// +listType=set
	AllowedEKPublicKeyHashes []string `json:"allowedEKPublicKeyHashes,omitempty" protobuf:"bytes,3,rep,name=allowedEKPublicKeyHashes"`
	// pcrPolicy is the PCR selection a quote must cover exactly, and where its
	// values come from.
	PCRPolicy PCRPolicy `json:"pcrPolicy" protobuf:"bytes,8,opt,name=pcrPolicy"`
	// signerNames are the signers whose Attestation approval this policy
	// gates.
	// +listType=set
	SignerNames []string `json:"signerNames" protobuf:"bytes,5,rep,name=signerNames"`
	// challengeLifetime is how long a challenge may be answered (default 5m).
	// +optional
	ChallengeLifetime *metav1.Duration `json:"challengeLifetime,omitempty" protobuf:"bytes,6,opt,name=challengeLifetime"`
	// maxAttemptsPerEKPerHour bounds the challenges one EK may ask for in an
	// hour (default 10).
	// +optional
	MaxAttemptsPerEKPerHour *int32 `json:"maxAttemptsPerEKPerHour,omitempty" protobuf:"varint,7,opt,name=maxAttemptsPerEKPerHour"`
}

// PCRPolicy is the PCRs of a quote.
type PCRPolicy struct {
	// bank is the PCR bank: sha256 (the default and only one supported).
	// +optional
	Bank string `json:"bank,omitempty" protobuf:"bytes,1,opt,name=bank"`
	// mode is Fixed or TrustOnFirstUse (default).
	// +optional
	Mode PCRMode `json:"mode,omitempty" protobuf:"bytes,2,opt,name=mode,casttype=PCRMode"`
	// selection is the exact set of PCR indexes (0-23) a quote must cover.
	// +listType=set
	Selection []int32 `json:"selection" protobuf:"varint,3,rep,name=selection"`
	// values are the expected values in mode Fixed, one per selected index.
	// +optional
	// +listType=map
	// +listMapKey=index
	Values []PCRValue `json:"values,omitempty" protobuf:"bytes,4,rep,name=values"`
}

// PCRValue is an expected PCR value.
type PCRValue struct {
	// index is the PCR index.
	Index int32 `json:"index" protobuf:"varint,1,opt,name=index"`
	// value is the PCR value in hex (64 characters for sha256).
	Value string `json:"value" protobuf:"bytes,2,opt,name=value"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// AttestationPolicyList is a list of AttestationPolicies.
type AttestationPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []AttestationPolicy `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// +genclient
// +genclient:nonNamespaced
// +genclient:method=Challenge,verb=create,subresource=challenge,input=ChallengeRequest,result=NodeAttestation
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeAttestation is a node's TPM attestation, named after the node: the
// node posts its EK and AK in spec; rekey checks them, answers with a
// credential-activation challenge in status, and records there what it
// verified when a certificate request answers the challenge.
type NodeAttestation struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Spec NodeAttestationSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	// +optional
	Status NodeAttestationStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// NodeAttestationSpec is what the node's agent reads from its TPM.
type NodeAttestationSpec struct {
	// policyName is the AttestationPolicy to attest under.
	PolicyName string `json:"policyName" protobuf:"bytes,1,opt,name=policyName"`
	// ekCertificate is the EK certificate (DER) from the TPM's NV storage;
	// optional when the policy allows the EK by its key hash.
	// +optional
	EKCertificate []byte `json:"ekCertificate,omitempty" protobuf:"bytes,2,opt,name=ekCertificate"`
	// ekPublic is the EK's public area (TPMT_PUBLIC).
	EKPublic []byte `json:"ekPublic" protobuf:"bytes,3,opt,name=ekPublic"`
	// akPublic is the attestation key's public area (TPMT_PUBLIC).
	AKPublic []byte `json:"akPublic" protobuf:"bytes,4,opt,name=akPublic"`
}

// NodeAttestationPhase is where an attestation is.
// +enum
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
	// +optional
	Phase NodeAttestationPhase `json:"phase,omitempty" protobuf:"bytes,1,opt,name=phase,casttype=NodeAttestationPhase"`
	// challenge is the outstanding credential-activation challenge.
	// +optional
	Challenge *AttestationChallenge `json:"challenge,omitempty" protobuf:"bytes,2,opt,name=challenge"`
	// ekFingerprint is the hex SHA-256 of the EK's public key.
	// +optional
	EKFingerprint string `json:"ekFingerprint,omitempty" protobuf:"bytes,3,opt,name=ekFingerprint"`
	// boundNode is the node the EK is bound to (on its first success).
	// +optional
	BoundNode string `json:"boundNode,omitempty" protobuf:"bytes,4,opt,name=boundNode"`
	// lastAttested is what the last successful attestation verified.
	// +optional
	LastAttested *AttestedRecord `json:"lastAttested,omitempty" protobuf:"bytes,5,opt,name=lastAttested"`
	// conditions: Ready (reason says why not).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,6,rep,name=conditions"`
}

// AttestationChallenge is TPM2_MakeCredential's output for the node's EK
// and AK; only that TPM can recover the secret.
type AttestationChallenge struct {
	CredentialBlob  []byte      `json:"credentialBlob" protobuf:"bytes,1,opt,name=credentialBlob"`
	EncryptedSecret []byte      `json:"encryptedSecret" protobuf:"bytes,2,opt,name=encryptedSecret"`
	ExpirationTime  metav1.Time `json:"expirationTime" protobuf:"bytes,3,opt,name=expirationTime"`
	// pcrSelection is the exact set of sha256 PCRs the node must quote.
	// +listType=set
	PCRSelection []int32 `json:"pcrSelection" protobuf:"varint,4,rep,name=pcrSelection"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ChallengeRequest is posted to a NodeAttestation's challenge subresource
// to have rekey check the EK and AK in its spec and answer with a fresh
// credential-activation challenge (status.challenge), replacing any
// outstanding one. Each counts against the policy's attempts per EK per
// hour. The answer is the NodeAttestation as it then stands.
type ChallengeRequest struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
}

// AttestedRecord is what an attestation verified.
type AttestedRecord struct {
	Time       metav1.Time `json:"time" protobuf:"bytes,1,opt,name=time"`
	PolicyName string      `json:"policyName" protobuf:"bytes,2,opt,name=policyName"`
	// +listType=set
	PCRIndexes []int32 `json:"pcrIndexes" protobuf:"varint,6,rep,name=pcrIndexes"`
	// firstUse is true when this attestation bound the EK to the node.
	FirstUse bool `json:"firstUse" protobuf:"varint,4,opt,name=firstUse"`
	// request is the certificate signing request it approved.
	Request string `json:"request" protobuf:"bytes,5,opt,name=request"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeAttestationList is a list of NodeAttestations.
type NodeAttestationList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []NodeAttestation `json:"items" protobuf:"bytes,2,rep,name=items"`
}
