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

// SetDefaults_CertificateAuthoritySpec fills the key algorithm, validity and
// key store type.
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
}
