package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// DefaultValidity is the lifetime of a CA certificate unless told otherwise.
const DefaultValidity = 10 * 365 * 24 * time.Hour

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}

// SetDefaults_CertificateAuthoritySpec fills the key algorithm, validity,
// key store type, and the rotation's trust propagation and renewal window.
func SetDefaults_CertificateAuthoritySpec(obj *CertificateAuthoritySpec) {
	if obj.KeyAlgorithm == "" {
		obj.KeyAlgorithm = ECDSAP256
	}
	if obj.Validity.Duration == 0 {
		obj.Validity = metav1.Duration{Duration: DefaultValidity}
	}
	if obj.KeyStore.Type == "" {
		obj.KeyStore.Type = KeyStoreEtcd
	}
	if obj.Rotation == nil {
		obj.Rotation = &RotationPolicy{}
	}
	if obj.Rotation.TrustPropagation == nil {
		obj.Rotation.TrustPropagation = &metav1.Duration{Duration: DefaultTrustPropagation}
	}
	if obj.Rotation.RenewalWindow == nil {
		obj.Rotation.RenewalWindow = &metav1.Duration{Duration: DefaultRenewalWindow}
	}
	if obj.Purpose == "" {
		obj.Purpose = PurposeCertificates
	}
	if obj.Purpose == PurposeServiceAccountTokens {
		if obj.ServiceAccountTokens == nil {
			obj.ServiceAccountTokens = &ServiceAccountTokenKeys{}
		}
		if obj.ServiceAccountTokens.MaxTokenExpiration == nil {
			obj.ServiceAccountTokens.MaxTokenExpiration = &metav1.Duration{Duration: DefaultMaxTokenExpiration}
		}
	}
}

// Defaults of a RotatingCredential.
const (
	DefaultRotationInterval = 720 * time.Hour
	DefaultGracePeriod      = 10 * time.Minute
	DefaultRandomKey        = "token"
	DefaultRandomLength     = 32
)

// SetDefaults_RotatingCredentialSpec fills the interval, the grace period
// and the Random minter's key and length.
func SetDefaults_RotatingCredentialSpec(obj *RotatingCredentialSpec) {
	if obj.RotationInterval == nil {
		obj.RotationInterval = &metav1.Duration{Duration: DefaultRotationInterval}
	}
	if obj.GracePeriod == nil {
		obj.GracePeriod = &metav1.Duration{Duration: DefaultGracePeriod}
	}
	// type Random needs nothing more: "random:" left empty (null in
	// YAML) gets the same defaults as "random: {}".
	if obj.Minter.Type == MinterRandom && obj.Minter.Random == nil {
		obj.Minter.Random = &RandomMinter{}
	}
	if r := obj.Minter.Random; r != nil {
		if r.Key == "" {
			r.Key = DefaultRandomKey
		}
		if r.Length == 0 {
			r.Length = DefaultRandomLength
		}
	}
}
