package rotation

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// CertificateAuthority is a CA whose private key rekey holds in a key store.
type CertificateAuthority struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   CertificateAuthoritySpec
	Status CertificateAuthorityStatus
}

// KeyAlgorithm is the algorithm of a CA key.
type KeyAlgorithm string

// Supported key algorithms.
const (
	ECDSAP256 KeyAlgorithm = "ECDSA-P256"
	ECDSAP384 KeyAlgorithm = "ECDSA-P384"
	RSA2048   KeyAlgorithm = "RSA-2048"
	RSA3072   KeyAlgorithm = "RSA-3072"
	RSA4096   KeyAlgorithm = "RSA-4096"
	Ed25519   KeyAlgorithm = "Ed25519"
)

// KeyStoreType is where a CA's private key lives.
type KeyStoreType string

// Key store types.
const (
	KeyStoreEtcd   KeyStoreType = "Etcd"
	KeyStoreFile   KeyStoreType = "File"
	KeyStorePKCS11 KeyStoreType = "PKCS11"
)

// CertificateAuthoritySpec declares a CA.
type CertificateAuthoritySpec struct {
	CommonName   string
	KeyAlgorithm KeyAlgorithm
	Validity     metav1.Duration
	KeyStore     KeyStore
	Publish      *Publish
	Rotation     *RotationPolicy
	// Purpose is what the key signs: certificates or service-account tokens.
	Purpose              CAPurpose
	ServiceAccountTokens *ServiceAccountTokenKeys
}

// CAPurpose is what a CertificateAuthority's key signs.
type CAPurpose string

// Purposes.
const (
	PurposeCertificates         CAPurpose = "Certificates"
	PurposeServiceAccountTokens CAPurpose = "ServiceAccountTokens"
)

// ServiceAccountTokenKeys configures a key that signs service-account tokens.
type ServiceAccountTokenKeys struct {
	MaxTokenExpiration *metav1.Duration
	Issuer             string
	LegacyPublicKeys   []LegacyPublicKey
}

// LegacyPublicKey is a public key that verifies tokens signed elsewhere.
type LegacyPublicKey struct {
	PublicKey  string
	ExpireTime metav1.Time
}

// RotationPolicy says how a rotation spreads trust and renewals.
type RotationPolicy struct {
	TrustPropagation *metav1.Duration
	RenewalWindow    *metav1.Duration
}

// Publish says where the trust bundle goes.
type Publish struct {
	ConfigMaps         *ConfigMapPublish
	ClusterTrustBundle bool
}

// ConfigMapPublish names the ConfigMaps a bundle goes to.
type ConfigMapPublish struct {
	Name              string
	Namespaces        []string
	NamespaceSelector *metav1.LabelSelector
}

// KeyStore says where the private key lives.
type KeyStore struct {
	Type   KeyStoreType
	File   *FileKeyStore
	Pkcs11 *PKCS11KeyStore
}

// FileKeyStore adopts an existing CA from PEM files.
type FileKeyStore struct {
	CertFile string
	KeyFile  string
}

// PKCS11KeyStore keeps the key in a PKCS#11 token.
type PKCS11KeyStore struct {
	ModulePath string
	TokenLabel string
	PINFile    string
}

// RotationPhase is the phase of a CA rotation.
type RotationPhase string

// Rotation phases (seed 000).
const (
	PhaseNone       RotationPhase = ""
	PhasePreparing  RotationPhase = "Preparing"
	PhasePrepared   RotationPhase = "Prepared"
	PhaseCompleting RotationPhase = "Completing"
	PhaseCompleted  RotationPhase = "Completed"
)

// CertificateAuthorityStatus is the observed state of a CA.
type CertificateAuthorityStatus struct {
	ObservedGeneration          int64
	Phase                       RotationPhase
	LastInitiationTime          *metav1.Time
	LastInitiationFinishedTime  *metav1.Time
	LastCompletionTriggeredTime *metav1.Time
	LastCompletionTime          *metav1.Time
	Current                     *CACertificate
	Previous                    *CACertificate
	TrustBundle                 string
	Conditions                  []metav1.Condition
	PendingRenewal              int32
	PendingRenewals             []PendingRenewal
	Next                        *CACertificate
	Trust                       *TrustStatus
}

// TrustStatus is how far a rotation's next CA has spread.
type TrustStatus struct {
	PublishedTime  *metav1.Time
	Unpublished    []string
	Consumers      int32
	Waiting        int32
	WaitingFor     []string
	OverriddenTime *metav1.Time
}

// PendingRenewal is a certificate signed by the previous CA that has not
// been renewed.
type PendingRenewal struct {
	Requester    string
	Subject      string
	CSRName      string
	SerialNumber string
	NotAfter     metav1.Time
}

// RotationAction is Start or Complete.
type RotationAction string

// Rotation actions.
const (
	RotationStart    RotationAction = "Start"
	RotationPrepare  RotationAction = "Prepare"
	RotationComplete RotationAction = "Complete"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Rotation starts or completes a rotation through the rotate subresource.
type Rotation struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Action RotationAction
	Force  bool
}

// CACertificate describes one CA certificate.
type CACertificate struct {
	Certificate  string
	Fingerprint  string
	SerialNumber string
	NotBefore    metav1.Time
	NotAfter     metav1.Time
	KeyID        string
	// TokenKeyID is the kid of the tokens a ServiceAccountTokens key signs.
	TokenKeyID string
	// TokensExpireTime is when every token a ServiceAccountTokens CA's
	// previous key may have signed has expired.
	TokensExpireTime *metav1.Time
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// JWTSignRequest asks a ServiceAccountTokens CA's current key to sign JWT
// claims (the signjwt subresource).
type JWTSignRequest struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Claims    string
	Header    string
	Signature string
	KeyID     string
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// CertificateAuthorityList is a list of CertificateAuthorities.
type CertificateAuthorityList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []CertificateAuthority
}

// CertificateAuthorityReady is the condition type saying the CA can sign.
const CertificateAuthorityReady = "Ready"

// CertificateAuthorityTrustPropagated is the condition type saying whether
// a rotation's next CA is trusted everywhere.
const CertificateAuthorityTrustPropagated = "TrustPropagated"

// ReasonWaitingForPublication is the TrustPropagated reason while the new
// CA is not yet in every bundle rekey publishes.
const ReasonWaitingForPublication = "WaitingForPublication"
