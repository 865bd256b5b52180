// Package fuzzer fills rotation.rekey.io objects with random but plausible
// values for round-trip tests.
package fuzzer

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/randfill"

	"rekey.io/rekey/pkg/apis/rotation"
)

// Funcs returns the fuzzer functions of the rotation group.
var Funcs = func(codecs runtimeserializer.CodecFactory) []interface{} {
	return []interface{}{
		func(spec *rotation.CertificateAuthoritySpec, c randfill.Continue) {
			c.FillNoCustom(spec)
			// What v1alpha1 defaulting produces.
			if spec.KeyAlgorithm == "" {
				spec.KeyAlgorithm = rotation.ECDSAP256
			}
			if spec.Validity.Duration == 0 {
				spec.Validity = metav1.Duration{Duration: 10 * 365 * 24 * time.Hour}
			}
			if spec.KeyStore.Type == "" {
				spec.KeyStore.Type = rotation.KeyStoreEtcd
			}
			if spec.Rotation == nil {
				spec.Rotation = &rotation.RotationPolicy{}
			}
			if spec.Rotation.TrustPropagation == nil {
				spec.Rotation.TrustPropagation = &metav1.Duration{Duration: 2 * time.Minute}
			}
			if spec.Rotation.RenewalWindow == nil {
				spec.Rotation.RenewalWindow = &metav1.Duration{Duration: 10 * time.Minute}
			}
			if spec.Purpose == "" {
				spec.Purpose = rotation.PurposeCertificates
			}
			if spec.Purpose == rotation.PurposeServiceAccountTokens {
				if spec.ServiceAccountTokens == nil {
					spec.ServiceAccountTokens = &rotation.ServiceAccountTokenKeys{}
				}
				if spec.ServiceAccountTokens.MaxTokenExpiration == nil {
					spec.ServiceAccountTokens.MaxTokenExpiration = &metav1.Duration{Duration: 24 * time.Hour}
				}
			}
		},
		func(spec *rotation.RotatingCredentialSpec, c randfill.Continue) {
			c.FillNoCustom(spec)
			// What v1alpha1 defaulting produces.
			if spec.RotationInterval == nil {
				spec.RotationInterval = &metav1.Duration{Duration: 720 * time.Hour}
			}
			if spec.GracePeriod == nil {
				spec.GracePeriod = &metav1.Duration{Duration: 10 * time.Minute}
			}
			if r := spec.Minter.Random; r != nil {
				if r.Key == "" {
					r.Key = "token"
				}
				if r.Length == 0 {
					r.Length = 32
				}
			}
		},
		func(status *rotation.RotatingCredentialStatus, c randfill.Continue) {
			c.FillNoCustom(status)
			if len(status.Conditions) == 0 {
				status.Conditions = nil
			}
		},
		func(status *rotation.CertificateAuthorityStatus, c randfill.Continue) {
			c.FillNoCustom(status)
			if len(status.Conditions) == 0 {
				status.Conditions = nil
			}
		},
	}
}
