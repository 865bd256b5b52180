package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:nonNamespaced
// +genclient:method=Rotate,verb=create,subresource=rotate,input=Rotation,result=CertificateAuthority
// +genclient:method=SignJWT,verb=create,subresource=signjwt,input=JWTSignRequest,result=JWTSignRequest
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// CertificateAuthority is a CA whose private key rekey keeps in a key store
// and never puts into an API object. rekey creates the key and the
// self-signed CA certificate (or adopts an existing CA from files) and
// publishes the certificate, its fingerprint and validity, and the trust
// bundle in status.
type CertificateAuthority struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// spec declares the CA. It is immutable: rotate to change the key.
	Spec CertificateAuthoritySpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`

	// status is the observed state of the CA.
	// +optional
	Status CertificateAuthorityStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// KeyAlgorithm is the algorithm of a CA key: ECDSA-P256, ECDSA-P384,
// RSA-2048, RSA-3072, RSA-4096 or Ed25519.
// +enum
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

// KeyStoreType is where a CA's private key lives: Etcd (encrypted with the
// server's key-encryption key, under a prefix the API never serves), File
// (PEM files, to adopt an existing CA) or PKCS11 (a hardware or software token).
// +enum
type KeyStoreType string

// Key store types.
const (
	KeyStoreEtcd   KeyStoreType = "Etcd"
	KeyStoreFile   KeyStoreType = "File"
	KeyStorePKCS11 KeyStoreType = "PKCS11"
)

// CertificateAuthoritySpec declares a CA.
type CertificateAuthoritySpec struct {
	// commonName is the subject common name of the CA certificate. Ignored
	// by the File key store, which adopts the certificate it finds.
	// +optional
	CommonName string `json:"commonName,omitempty" protobuf:"bytes,1,opt,name=commonName"`

	// keyAlgorithm is the algorithm of the CA key. Defaults to ECDSA-P256.
	// The PKCS11 key store does not support Ed25519.
	// +optional
	KeyAlgorithm KeyAlgorithm `json:"keyAlgorithm,omitempty" protobuf:"bytes,2,opt,name=keyAlgorithm,casttype=KeyAlgorithm"`

	// validity is the lifetime of the CA certificate. Defaults to 87600h
	// (10 years); at least 1h.
	// +optional
	Validity metav1.Duration `json:"validity,omitempty" protobuf:"bytes,3,opt,name=validity"`

	// keyStore says where the private key lives.
	// +optional
	KeyStore KeyStore `json:"keyStore,omitempty" protobuf:"bytes,4,opt,name=keyStore"`

	// publish sends the trust bundle (old and new CA during a rotation) to
	// the host cluster, updated at every phase. Mutable, like rotation;
	// the rest of spec is not. Needs a host cluster (rekey-apiserver
	// --kubeconfig); in standalone mode the bundle is in status only.
	// +optional
	Publish *Publish `json:"publish,omitempty" protobuf:"bytes,5,opt,name=publish"`

	// rotation says how a rotation spreads trust and renewals. Mutable,
	// like publish.
	// +optional
	Rotation *RotationPolicy `json:"rotation,omitempty" protobuf:"bytes,6,opt,name=rotation"`

	// purpose is what the key signs: Certificates (the default: Signers
	// issue with it) or ServiceAccountTokens (kube-apiserver's
	// service-account tokens, through its external JWT signer; no Signer
	// may use it). Immutable.
	// +optional
	Purpose CAPurpose `json:"purpose,omitempty" protobuf:"bytes,7,opt,name=purpose,casttype=CAPurpose"`

	// serviceAccountTokens configures a ServiceAccountTokens key: set
	// (defaulted) only with that purpose. Its legacyPublicKeys may change;
	// the rest is immutable.
	// +optional
	ServiceAccountTokens *ServiceAccountTokenKeys `json:"serviceAccountTokens,omitempty" protobuf:"bytes,8,opt,name=serviceAccountTokens"`
}

// CAPurpose is what a CertificateAuthority's key signs.
// +enum
type CAPurpose string

// Purposes.
const (
	// PurposeCertificates: the key signs certificates for Signers.
	PurposeCertificates CAPurpose = "Certificates"
	// PurposeServiceAccountTokens: the key signs kube-apiserver's
	// service-account tokens (JWTs), and nothing else.
	PurposeServiceAccountTokens CAPurpose = "ServiceAccountTokens"
)

// DefaultMaxTokenExpiration is spec.serviceAccountTokens.maxTokenExpiration
// when unset.
const DefaultMaxTokenExpiration = 24 * time.Hour

// ServiceAccountTokenKeys configures a key that signs service-account tokens.
type ServiceAccountTokenKeys struct {
	// maxTokenExpiration is the longest lifetime of a token the key signs
	// (exp - iat): what the signer's Metadata tells kube-apiserver, which
	// then caps every TokenRequest (and its extended expiration) at it. A
	// rotation's Complete waits this long after the new key began to sign,
	// so that every token of the old key has expired. Defaults to 24h; at
	// least 10m (kube-apiserver's minimum), at most 8760h. Immutable.
	// +optional
	MaxTokenExpiration *metav1.Duration `json:"maxTokenExpiration,omitempty" protobuf:"bytes,1,opt,name=maxTokenExpiration"`

	// issuer, when set, is the only "iss" claim the key signs: kube-apiserver's
	// first --service-account-issuer. Immutable.
	// +optional
	Issuer string `json:"issuer,omitempty" protobuf:"bytes,2,opt,name=issuer"`

	// legacyPublicKeys are public keys of the signer this one replaces
	// (kube-apiserver's --service-account-key-file): served to
	// kube-apiserver for verification only, kept out of OIDC discovery,
	// until their expireTime, so that tokens signed before the switch keep
	// working until they expire. At most 8.
	// +listType=atomic
	// +optional
	LegacyPublicKeys []LegacyPublicKey `json:"legacyPublicKeys,omitempty" protobuf:"bytes,3,rep,name=legacyPublicKeys"`
}

// LegacyPublicKey is a public key that verifies tokens signed elsewhere.
type LegacyPublicKey struct {
	// publicKey is one PEM "PUBLIC KEY" (PKIX) or "RSA PUBLIC KEY" block:
	// the contents of kube-apiserver's --service-account-key-file (one key
	// per entry).
	PublicKey string `json:"publicKey" protobuf:"bytes,1,opt,name=publicKey"`
	// expireTime is when the last token the key signed expires; after it
	// the key is no longer served.
	ExpireTime metav1.Time `json:"expireTime" protobuf:"bytes,2,opt,name=expireTime"`
}

// Defaults of spec.rotation.
const (
	// DefaultTrustPropagation is longer than the kubelet's refresh of
	// ConfigMap and ClusterTrustBundle volumes (about a minute).
	DefaultTrustPropagation = 2 * time.Minute
	// DefaultRenewalWindow spreads the renewals that follow Prepared.
	DefaultRenewalWindow = 10 * time.Minute
)

// RotationPolicy says how a rotation spreads trust and renewals.
type RotationPolicy struct {
	// trustPropagation is how long the next CA must have been in every
	// bundle rekey publishes (status, ConfigMaps, ClusterTrustBundles, its
	// APIServices' caBundle) before it signs: time for what reads those
	// bundles (a pod's mounted ConfigMap, say) to load it. Defaults to 2m;
	// 0s allowed. Trust consumers that report what they hold are waited
	// for besides.
	// +optional
	TrustPropagation *metav1.Duration `json:"trustPropagation,omitempty" protobuf:"bytes,1,opt,name=trustPropagation"`
	// renewalWindow spreads the renewals after Prepared: rekey-agent renews
	// a certificate of the previous CA at a point inside the window drawn
	// from the certificate itself, so that nodes do not all renew in one
	// second. Defaults to 10m; 0s renews at once.
	// +optional
	RenewalWindow *metav1.Duration `json:"renewalWindow,omitempty" protobuf:"bytes,2,opt,name=renewalWindow"`
}

// Publish says where the trust bundle goes.
type Publish struct {
	// configMaps writes the bundle, under key ca.crt, to a ConfigMap in
	// each listed namespace and each namespace matching namespaceSelector.
	// +optional
	ConfigMaps *ConfigMapPublish `json:"configMaps,omitempty" protobuf:"bytes,1,opt,name=configMaps"`
	// clusterTrustBundle writes the bundle to a certificates.k8s.io
	// ClusterTrustBundle for each signer name whose Signer uses this CA,
	// named "<signer name with / as :>:<CA name>".
	// +optional
	ClusterTrustBundle bool `json:"clusterTrustBundle,omitempty" protobuf:"varint,2,opt,name=clusterTrustBundle"`
}

// ConfigMapPublish names the ConfigMaps a bundle goes to.
type ConfigMapPublish struct {
	// name of the ConfigMap; defaults to the CertificateAuthority's name.
	// +optional
	Name string `json:"name,omitempty" protobuf:"bytes,1,opt,name=name"`
	// namespaces to write it in.
	// +listType=set
	// +optional
	Namespaces []string `json:"namespaces,omitempty" protobuf:"bytes,2,rep,name=namespaces"`
	// namespaceSelector picks more namespaces by label.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty" protobuf:"bytes,3,opt,name=namespaceSelector"`
}

// KeyStore says where the private key lives.
type KeyStore struct {
	// type is Etcd (default), File or PKCS11.
	// +optional
	Type KeyStoreType `json:"type,omitempty" protobuf:"bytes,1,opt,name=type,casttype=KeyStoreType"`

	// file locates the PEM files of an existing CA. Required for type File.
	// The files are read on the server's host and re-read when they change.
	// +optional
	File *FileKeyStore `json:"file,omitempty" protobuf:"bytes,2,opt,name=file"`

	// pkcs11 locates the token. Required for type PKCS11.
	// +optional
	Pkcs11 *PKCS11KeyStore `json:"pkcs11,omitempty" protobuf:"bytes,3,opt,name=pkcs11"`
}

// FileKeyStore adopts an existing CA from PEM files.
type FileKeyStore struct {
	// certFile is the path of the PEM CA certificate.
	CertFile string `json:"certFile" protobuf:"bytes,1,opt,name=certFile"`
	// keyFile is the path of the PEM private key (PKCS#1, PKCS#8 or SEC 1).
	KeyFile string `json:"keyFile" protobuf:"bytes,2,opt,name=keyFile"`
}

// PKCS11KeyStore keeps the key in a PKCS#11 token.
type PKCS11KeyStore struct {
	// modulePath is the path of the PKCS#11 module, e.g. /usr/lib/softhsm/libsofthsm2.so.
	ModulePath string `json:"modulePath" protobuf:"bytes,1,opt,name=modulePath"`
	// tokenLabel selects the token.
	TokenLabel string `json:"tokenLabel" protobuf:"bytes,2,opt,name=tokenLabel"`
	// pinFile is the path of a file holding the user PIN (never the PIN itself).
	PINFile string `json:"pinFile" protobuf:"bytes,3,opt,name=pinFile"`
}

// RotationPhase is the phase of a CA rotation: "", Preparing, Prepared,
// Completing or Completed.
// +enum
type RotationPhase string

// Rotation phases.
const (
	PhaseNone       RotationPhase = ""
	PhasePreparing  RotationPhase = "Preparing"
	PhasePrepared   RotationPhase = "Prepared"
	PhaseCompleting RotationPhase = "Completing"
	PhaseCompleted  RotationPhase = "Completed"
)

// CertificateAuthorityStatus is the observed state of a CA.
type CertificateAuthorityStatus struct {
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`

	// phase of the current or last rotation.
	// +optional
	Phase RotationPhase `json:"phase,omitempty" protobuf:"bytes,2,opt,name=phase,casttype=RotationPhase"`

	// lastInitiationTime is when the last rotation was started.
	// +optional
	LastInitiationTime *metav1.Time `json:"lastInitiationTime,omitempty" protobuf:"bytes,3,opt,name=lastInitiationTime"`
	// lastInitiationFinishedTime is when the last rotation reached Prepared.
	// +optional
	LastInitiationFinishedTime *metav1.Time `json:"lastInitiationFinishedTime,omitempty" protobuf:"bytes,4,opt,name=lastInitiationFinishedTime"`
	// lastCompletionTriggeredTime is when the last rotation was asked to complete.
	// +optional
	LastCompletionTriggeredTime *metav1.Time `json:"lastCompletionTriggeredTime,omitempty" protobuf:"bytes,5,opt,name=lastCompletionTriggeredTime"`
	// lastCompletionTime is when the last rotation reached Completed.
	// +optional
	LastCompletionTime *metav1.Time `json:"lastCompletionTime,omitempty" protobuf:"bytes,6,opt,name=lastCompletionTime"`

	// current is the CA certificate that signs.
	// +optional
	Current *CACertificate `json:"current,omitempty" protobuf:"bytes,7,opt,name=current"`
	// previous is the CA certificate being rotated out, still trusted.
	// +optional
	Previous *CACertificate `json:"previous,omitempty" protobuf:"bytes,8,opt,name=previous"`

	// trustBundle is the PEM of every CA certificate to trust now.
	// +optional
	TrustBundle string `json:"trustBundle,omitempty" protobuf:"bytes,9,opt,name=trustBundle"`

	// conditions: Ready is True when the key can be reached and the CA
	// signs; TrustPropagated, during and after Preparing, says whether the
	// next CA is trusted everywhere and, while not, what is waited for.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,10,rep,name=conditions"`

	// pendingRenewal counts the certificates signed by previous that are
	// still valid and whose requester has not had the same subject
	// certified by current since the rotation started (from the issuance
	// records). Complete is refused while it is above zero, unless forced.
	// +optional
	PendingRenewal int32 `json:"pendingRenewal,omitempty" protobuf:"varint,11,opt,name=pendingRenewal"`

	// pendingRenewals lists the first of them (at most 20), oldest first.
	// +listType=atomic
	// +optional
	PendingRenewals []PendingRenewal `json:"pendingRenewals,omitempty" protobuf:"bytes,12,rep,name=pendingRenewals"`

	// next is, while Preparing, the new CA certificate: in the trust bundle
	// beside current, it signs nothing until it is trusted (Prepared).
	// +optional
	Next *CACertificate `json:"next,omitempty" protobuf:"bytes,13,opt,name=next"`

	// trust is how far the next CA has spread, during Preparing (and as it
	// stood when the last rotation reached Prepared).
	// +optional
	Trust *TrustStatus `json:"trust,omitempty" protobuf:"bytes,14,opt,name=trust"`
}

// TrustStatus is how far a rotation's next CA has spread.
type TrustStatus struct {
	// publishedTime is when every bundle rekey publishes first held the
	// next CA; trustPropagation is counted from it.
	// +optional
	PublishedTime *metav1.Time `json:"publishedTime,omitempty" protobuf:"bytes,1,opt,name=publishedTime"`
	// unpublished names what rekey itself publishes that does not hold
	// the next CA yet (rekey-publisher, rekey-serving-ca), with why.
	// +listType=atomic
	// +optional
	Unpublished []string `json:"unpublished,omitempty" protobuf:"bytes,2,rep,name=unpublished"`
	// consumers counts the TrustConsumers that name this CA.
	// +optional
	Consumers int32 `json:"consumers,omitempty" protobuf:"varint,3,opt,name=consumers"`
	// waiting counts those that have not reported holding the next CA.
	// +optional
	Waiting int32 `json:"waiting,omitempty" protobuf:"varint,4,opt,name=waiting"`
	// waitingFor names the first of them (at most 20), by name.
	// +listType=atomic
	// +optional
	WaitingFor []string `json:"waitingFor,omitempty" protobuf:"bytes,5,rep,name=waitingFor"`
	// overriddenTime is when an operator ended the wait (a Prepare
	// Rotation with force): the next CA then signs whoever trusts it.
	// +optional
	OverriddenTime *metav1.Time `json:"overriddenTime,omitempty" protobuf:"bytes,6,opt,name=overriddenTime"`
}

// PendingRenewal is a certificate signed by the previous CA that has not
// been renewed.
type PendingRenewal struct {
	// requester is the user who requested the certificate.
	Requester string `json:"requester" protobuf:"bytes,1,opt,name=requester"`
	// subject is the certificate's subject.
	Subject string `json:"subject" protobuf:"bytes,2,opt,name=subject"`
	// csrName is the CertificateSigningRequest it was issued for.
	CSRName string `json:"csrName" protobuf:"bytes,3,opt,name=csrName"`
	// serialNumber is the certificate's serial number in hex.
	SerialNumber string `json:"serialNumber" protobuf:"bytes,4,opt,name=serialNumber"`
	// notAfter is the end of its validity.
	NotAfter metav1.Time `json:"notAfter" protobuf:"bytes,5,opt,name=notAfter"`
}

// RotationAction is what a Rotation asks for: Start, Prepare or Complete.
// +enum
type RotationAction string

// Rotation actions.
const (
	// RotationStart makes a new CA key and certificate and publishes it
	// beside the old one; the old CA signs until the new one is trusted
	// everywhere (Prepared), then the new one signs.
	RotationStart RotationAction = "Start"
	// RotationPrepare, with force, ends a Preparing wait for trust: the
	// new CA signs although some consumer may not trust it yet.
	RotationPrepare RotationAction = "Prepare"
	// RotationComplete stops trusting the old CA and destroys its key.
	RotationComplete RotationAction = "Complete"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Rotation is posted to a CertificateAuthority's rotate subresource to
// start or complete a two-phase rotation. The answer is the
// CertificateAuthority as it then stands.
type Rotation struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// action is Start, Prepare or Complete.
	Action RotationAction `json:"action" protobuf:"bytes,2,opt,name=action,casttype=RotationAction"`

	// force, with Complete, completes although certificates signed by the
	// previous CA are still valid and not renewed (status.pendingRenewal
	// above zero): they stop verifying. With Prepare (where it is
	// required), it ends the wait for trust: clients that do not trust the
	// new CA yet fail to verify what it signs.
	// +optional
	Force bool `json:"force,omitempty" protobuf:"varint,3,opt,name=force"`
}

// CACertificate describes one CA certificate.
type CACertificate struct {
	// certificate is the PEM CA certificate.
	Certificate string `json:"certificate" protobuf:"bytes,1,opt,name=certificate"`
	// fingerprint is the SHA-256 of the certificate's DER, as "SHA256:" and hex.
	Fingerprint string `json:"fingerprint" protobuf:"bytes,2,opt,name=fingerprint"`
	// serialNumber is the certificate's serial number in hex.
	SerialNumber string `json:"serialNumber" protobuf:"bytes,3,opt,name=serialNumber"`
	// notBefore is the start of validity.
	NotBefore metav1.Time `json:"notBefore" protobuf:"bytes,4,opt,name=notBefore"`
	// notAfter is the end of validity.
	NotAfter metav1.Time `json:"notAfter" protobuf:"bytes,5,opt,name=notAfter"`
	// keyID names the private key inside the key store (not secret).
	// +optional
	KeyID string `json:"keyID,omitempty" protobuf:"bytes,6,opt,name=keyID"`
	// tokenKeyID is, for a ServiceAccountTokens CA, the "kid" of the tokens
	// the key signs: the unpadded base64url SHA-256 of its PKIX public key,
	// as kube-apiserver names its own keys.
	// +optional
	TokenKeyID string `json:"tokenKeyID,omitempty" protobuf:"bytes,7,opt,name=tokenKeyID"`
	// tokensExpireTime is, for a ServiceAccountTokens CA's previous key,
	// when every token it may have signed has expired: when it stopped
	// signing (Prepared) plus maxTokenExpiration and three minutes of
	// leeway (signjwt's slack on exp, kube-apiserver's on expiry, replicas'
	// key caches).
	// Complete waits for it unless forced.
	// +optional
	TokensExpireTime *metav1.Time `json:"tokensExpireTime,omitempty" protobuf:"bytes,8,opt,name=tokensExpireTime"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// JWTSignRequest is posted to a ServiceAccountTokens CertificateAuthority's
// signjwt subresource by rekey-agent jwt-signer, on behalf of the
// kube-apiserver that asked it to sign: the answer carries the JWS header
// and signature made with the CA's current key. Whoever may create it can
// mint any service-account token the issuer's verifiers accept: grant it
// to the control plane's signers only.
type JWTSignRequest struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// claims is the JWT claims set as kube-apiserver sends it: unpadded
	// base64url of a JSON object, at most 64 KiB.
	Claims string `json:"claims" protobuf:"bytes,2,opt,name=claims"`

	// header is, in the answer, the unpadded base64url JWS header (alg,
	// kid, typ).
	// +optional
	Header string `json:"header,omitempty" protobuf:"bytes,3,opt,name=header"`
	// signature is, in the answer, the unpadded base64url signature of
	// header.claims.
	// +optional
	Signature string `json:"signature,omitempty" protobuf:"bytes,4,opt,name=signature"`
	// keyID is, in the answer, the kid that signed.
	// +optional
	KeyID string `json:"keyID,omitempty" protobuf:"bytes,5,opt,name=keyID"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// CertificateAuthorityList is a list of CertificateAuthorities.
type CertificateAuthorityList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// items are the certificate authorities.
	Items []CertificateAuthority `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// CertificateAuthorityReady is the condition type saying the CA can sign.
const CertificateAuthorityReady = "Ready"

// CertificateAuthorityTrustPropagated is the condition type saying whether
// a rotation's next CA is trusted everywhere (reasons below).
const CertificateAuthorityTrustPropagated = "TrustPropagated"

// CertificateAuthorityPublished is the condition type saying whether
// spec.publish is carried out. Set to False with reason NoHostCluster on a
// server without a host cluster, where there is nowhere to publish; absent
// otherwise.
const CertificateAuthorityPublished = "Published"

// ReasonNoHostCluster: rekey-apiserver runs without a host cluster
// (--kubeconfig), so what needs one is not done.
const ReasonNoHostCluster = "NoHostCluster"

// Reasons of the TrustPropagated condition.
const (
	ReasonWaitingForPublication = "WaitingForPublication"
	ReasonWaitingForConsumers   = "WaitingForConsumers"
	ReasonWaitingForPropagation = "WaitingForPropagation"
	ReasonTrusted               = "Trusted"
	ReasonOverridden            = "Overridden"
)
