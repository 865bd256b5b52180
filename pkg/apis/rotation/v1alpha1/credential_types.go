package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// +genclient
// +genclient:method=Rotate,verb=create,subresource=rotate,input=Rotation,result=RotatingCredential
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RotatingCredential keeps a credential in a Secret of its namespace and
// replaces it when it is due: rekey mints a new one, keeps the previous
// one beside it (keys suffixed ".old") for a grace period, then revokes it
// where the minter can and removes the ".old" keys.
type RotatingCredential struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Spec RotatingCredentialSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	// +optional
	Status RotatingCredentialStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// SecretReference names a Secret in the RotatingCredential's namespace.
type SecretReference struct {
	// name of the Secret.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
}

// RotatingCredentialSpec says where the credential lives, how often it is
// replaced and how it is made.
type RotatingCredentialSpec struct {
	// secretRef is the Secret that holds the credential (created if
	// missing, labelled rekey.io/managed-by=rekey).
	SecretRef SecretReference `json:"secretRef" protobuf:"bytes,1,opt,name=secretRef"`
	// rotationInterval is how long a credential is current before a new one
	// is minted (at least 30s; default 720h).
	// +optional
	RotationInterval *metav1.Duration `json:"rotationInterval,omitempty" protobuf:"bytes,2,opt,name=rotationInterval"`
	// gracePeriod is how long the previous credential stays in the Secret
	// (and valid) after a new one is minted (default 10m; less than
	// rotationInterval).
	// +optional
	GracePeriod *metav1.Duration `json:"gracePeriod,omitempty" protobuf:"bytes,3,opt,name=gracePeriod"`
	// minter makes (and revokes) the credential.
	Minter Minter `json:"minter" protobuf:"bytes,4,opt,name=minter"`
}

// MinterType names a minter.
// +enum
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
	Type MinterType `json:"type" protobuf:"bytes,1,opt,name=type,casttype=MinterType"`
	// +optional
	Random *RandomMinter `json:"random,omitempty" protobuf:"bytes,2,opt,name=random"`
	// +optional
	ClientCertificate *ClientCertificateMinter `json:"clientCertificate,omitempty" protobuf:"bytes,3,opt,name=clientCertificate"`
	// +optional
	ServiceAccountToken *ServiceAccountTokenMinter `json:"serviceAccountToken,omitempty" protobuf:"bytes,4,opt,name=serviceAccountToken"`
	// +optional
	Webhook *WebhookMinter `json:"webhook,omitempty" protobuf:"bytes,5,opt,name=webhook"`
}

// RandomMinter makes a random token from crypto/rand.
type RandomMinter struct {
	// key is the Secret key (default "token").
	// +optional
	Key string `json:"key,omitempty" protobuf:"bytes,1,opt,name=key"`
	// length is the number of random bytes (default 32), or of characters
	// when alphabet is set.
	// +optional
	Length int32 `json:"length,omitempty" protobuf:"varint,2,opt,name=length"`
	// alphabet, when set, draws each character uniformly from it instead of
	// encoding random bytes as URL-safe base64.
	// +optional
	Alphabet string `json:"alphabet,omitempty" protobuf:"bytes,3,opt,name=alphabet"`
}

// ClientCertificateMinter makes a key pair in rekey and a client
// certificate for it through a rekey Signer: tls.crt, tls.key, ca.crt.
type ClientCertificateMinter struct {
	// signerName is the rekey signer that signs it.
	SignerName string `json:"signerName" protobuf:"bytes,1,opt,name=signerName"`
	// commonName of the certificate.
	CommonName string `json:"commonName" protobuf:"bytes,2,opt,name=commonName"`
	// organizations of the certificate.
	// +optional
	// +listType=atomic
	Organizations []string `json:"organizations,omitempty" protobuf:"bytes,3,rep,name=organizations"`
	// duration of the certificate (default: rotationInterval plus
	// gracePeriod, at least 10m).
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty" protobuf:"bytes,4,opt,name=duration"`
}

// ServiceAccountTokenMinter requests a token through the host cluster's
// TokenRequest API, bound to an object rekey owns per generation: revoking
// deletes that object, and kube-apiserver then refuses the token.
type ServiceAccountTokenMinter struct {
	// serviceAccountName in the RotatingCredential's namespace.
	ServiceAccountName string `json:"serviceAccountName" protobuf:"bytes,1,opt,name=serviceAccountName"`
	// audiences of the token (default: the API server's).
	// +optional
	// +listType=atomic
	Audiences []string `json:"audiences,omitempty" protobuf:"bytes,2,rep,name=audiences"`
	// expirationSeconds of the token (default: rotationInterval plus
	// gracePeriod plus 10m; kube-apiserver may shorten or lengthen it).
	// +optional
	ExpirationSeconds *int64 `json:"expirationSeconds,omitempty" protobuf:"varint,3,opt,name=expirationSeconds"`
}

// WebhookMinter asks an external system to mint and revoke (the protocol
// is in docs/credentials.md).
type WebhookMinter struct {
	// url is the https endpoint that receives mint and revoke requests.
	URL string `json:"url" protobuf:"bytes,1,opt,name=url"`
	// caBundle verifies its serving certificate (PEM; default: the system
	// roots).
	// +optional
	CABundle []byte `json:"caBundle,omitempty" protobuf:"bytes,2,opt,name=caBundle"`
	// timeoutSeconds bounds each call (default 10, at most 30).
	// +optional
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty" protobuf:"varint,3,opt,name=timeoutSeconds"`
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
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`
	// phase is "", Rotating or Completed.
	// +optional
	Phase CredentialPhase `json:"phase,omitempty" protobuf:"bytes,2,opt,name=phase,casttype=CredentialPhase"`
	// mintTime is when the current credential was minted.
	// +optional
	MintTime *metav1.Time `json:"mintTime,omitempty" protobuf:"bytes,3,opt,name=mintTime"`
	// nextRotationTime is when the next one is due.
	// +optional
	NextRotationTime *metav1.Time `json:"nextRotationTime,omitempty" protobuf:"bytes,4,opt,name=nextRotationTime"`
	// graceEndsTime is when the previous credential is revoked.
	// +optional
	GraceEndsTime *metav1.Time `json:"graceEndsTime,omitempty" protobuf:"bytes,5,opt,name=graceEndsTime"`
	// credentialGeneration counts the mints; the current credential is
	// this one.
	// +optional
	CredentialGeneration int64 `json:"credentialGeneration,omitempty" protobuf:"varint,6,opt,name=credentialGeneration"`
	// rotationRequestedTime is when /rotate Start asked for a mint now.
	// +optional
	RotationRequestedTime *metav1.Time `json:"rotationRequestedTime,omitempty" protobuf:"bytes,7,opt,name=rotationRequestedTime"`
	// completionRequestedTime is when /rotate Complete asked to end the
	// grace period now.
	// +optional
	CompletionRequestedTime *metav1.Time `json:"completionRequestedTime,omitempty" protobuf:"bytes,8,opt,name=completionRequestedTime"`
	// rotationRequestedGeneration is the credentialGeneration /rotate Start
	// asked to replace (stamped by the server from status); the request is
	// served once a later generation is minted.
	// +optional
	RotationRequestedGeneration int64 `json:"rotationRequestedGeneration,omitempty" protobuf:"varint,10,opt,name=rotationRequestedGeneration"`
	// completionRequestedGeneration is the credentialGeneration whose grace
	// period /rotate Complete asked to end (stamped by the server); it ends
	// that grace period only, never a later one.
	// +optional
	CompletionRequestedGeneration int64 `json:"completionRequestedGeneration,omitempty" protobuf:"varint,11,opt,name=completionRequestedGeneration"`
	// secretUID is the UID of the Secret rekey created for this credential:
	// rekey writes only into the Secret with this UID.
	// +optional
	SecretUID types.UID `json:"secretUID,omitempty" protobuf:"bytes,12,opt,name=secretUID,casttype=k8s.io/apimachinery/pkg/types.UID"`
	// secretClaim is the hex SHA-256 of a random value rekey put on a
	// Secret it was creating, recorded before the create: it proves a
	// Secret rekey created but did not record yet (a crash in between).
	// +optional
	SecretClaim string `json:"secretClaim,omitempty" protobuf:"bytes,13,opt,name=secretClaim"`
	// conditions: Ready and Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,9,rep,name=conditions"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RotatingCredentialList is a list of RotatingCredentials.
type RotatingCredentialList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// items are the rotating credentials.
	Items []RotatingCredential `json:"items" protobuf:"bytes,2,rep,name=items"`
}
