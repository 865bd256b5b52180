package rotation

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RotatingCredential keeps a credential in a Secret of its namespace and
// replaces it when it is due: rekey mints a new one, keeps the previous
// one beside it (keys suffixed ".old") for a grace period, then revokes it
// where the minter can and removes the ".old" keys.
type RotatingCredential struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   RotatingCredentialSpec
	Status RotatingCredentialStatus
}

// SecretReference names a Secret in the RotatingCredential's namespace.
type SecretReference struct {
	// name of the Secret.
	Name string
}

// RotatingCredentialSpec says where the credential lives, how often it is
// replaced and how it is made.
type RotatingCredentialSpec struct {
	// secretRef is the Secret that holds the credential (created if
	// missing, labelled rekey.io/managed-by=rekey).
	SecretRef SecretReference
	// rotationInterval is how long a credential is current before a new one
	// is minted (at least 30s; default 720h).
	RotationInterval *metav1.Duration
	// gracePeriod is how long the previous credential stays in the Secret
	// (and valid) after a new one is minted (default 10m; less than
	// rotationInterval).
	GracePeriod *metav1.Duration
	// minter makes (and revokes) the credential.
	Minter Minter
}

// MinterType names a minter.
type MinterType string

// Minter types.
const (
	MinterRandom              MinterType = "Random"
	MinterClientCertificate   MinterType = "ClientCertificate"
	MinterServiceAccountToken MinterType = "ServiceAccountToken"
	MinterWebhook             MinterType = "Webhook"
)

// Minter is a minter type and its settings (exactly the block of its type).
type Minter struct {
	// type is Random, ClientCertificate, ServiceAccountToken or Webhook.
	Type                MinterType
	Random              *RandomMinter
	ClientCertificate   *ClientCertificateMinter
	ServiceAccountToken *ServiceAccountTokenMinter
	Webhook             *WebhookMinter
}

// RandomMinter makes a random token from crypto/rand.
type RandomMinter struct {
	// key is the Secret key (default "token").
	Key string
	// length is the number of random bytes (default 32), or of characters
	// when alphabet is set.
	Length int32
	// alphabet, when set, draws each character uniformly from it instead of
	// encoding random bytes as URL-safe base64.
	Alphabet string
}

// ClientCertificateMinter makes a key pair in rekey and a client
// certificate for it through a rekey Signer: tls.crt, tls.key, ca.crt.
type ClientCertificateMinter struct {
	// signerName is the rekey signer that signs it.
	SignerName string
	// commonName of the certificate.
	CommonName string
	// organizations of the certificate.
	Organizations []string
	// duration of the certificate (default: rotationInterval plus
	// gracePeriod, at least 10m).
	Duration *metav1.Duration
}

// ServiceAccountTokenMinter requests a token through the host cluster's
// TokenRequest API, bound to an object rekey owns per generation: revoking
// deletes that object, and kube-apiserver then refuses the token.
type ServiceAccountTokenMinter struct {
	// serviceAccountName in the RotatingCredential's namespace.
	ServiceAccountName string
	// audiences of the token (default: the API server's).
	Audiences []string
	// expirationSeconds of the token (default: rotationInterval plus
	// gracePeriod plus 10m; kube-apiserver may shorten or lengthen it).
	ExpirationSeconds *int64
}

// WebhookMinter asks an external system to mint and revoke (the protocol
// is in docs/credentials.md).
type WebhookMinter struct {
	// url is the https endpoint that receives mint and revoke requests.
	URL string
	// caBundle verifies its serving certificate (PEM; default: the system
	// roots).
	CABundle []byte
	// timeoutSeconds bounds each call (default 10, at most 30).
	TimeoutSeconds *int32
}

// CredentialPhase is where a rotation is.
type CredentialPhase string

// Credential phases.
const (
	CredentialPhaseNone CredentialPhase = ""
	// CredentialRotating: a new credential is current and the previous one
	// is kept for the grace period.
	CredentialRotating CredentialPhase = "Rotating"
	// CredentialCompleted: the previous credential was revoked and removed.
	CredentialCompleted CredentialPhase = "Completed"
)

// RotatingCredentialStatus is written by rekey.
type RotatingCredentialStatus struct {
	// observedGeneration is the generation this status describes.
	ObservedGeneration int64
	// phase is "", Rotating or Completed.
	Phase CredentialPhase
	// mintTime is when the current credential was minted.
	MintTime *metav1.Time
	// nextRotationTime is when the next one is due.
	NextRotationTime *metav1.Time
	// graceEndsTime is when the previous credential is revoked.
	GraceEndsTime *metav1.Time
	// credentialGeneration counts the mints; the current credential is
	// this one.
	CredentialGeneration int64
	// rotationRequestedTime is when /rotate Start asked for a mint now.
	RotationRequestedTime *metav1.Time
	// completionRequestedTime is when /rotate Complete asked to end the
	// grace period now.
	CompletionRequestedTime *metav1.Time
	// rotationRequestedGeneration is the credentialGeneration /rotate Start
	// asked to replace (stamped by the server from status); the request is
	// served once a later generation is minted.
	RotationRequestedGeneration int64
	// completionRequestedGeneration is the credentialGeneration whose grace
	// period /rotate Complete asked to end (stamped by the server); it ends
	// that grace period only, never a later one.
	CompletionRequestedGeneration int64
	// secretUID is the UID of the Secret rekey created for this credential:
	// rekey writes only into the Secret with this UID.
	SecretUID types.UID
	// secretClaim is the hex SHA-256 of a random value rekey put on a
	// Secret it was creating, recorded before the create: it proves a
	// Secret rekey created but did not record yet (a crash in between).
	SecretClaim string
	// conditions: Ready and Degraded.
	Conditions []metav1.Condition
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RotatingCredentialList is a list of RotatingCredentials.
type RotatingCredentialList struct {
	metav1.TypeMeta
	metav1.ListMeta

	// items are the rotating credentials.
	Items []RotatingCredential
}
