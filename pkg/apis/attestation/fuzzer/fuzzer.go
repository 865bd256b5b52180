// Package fuzzer fills attestation.rekey.io objects with random but
// plausible values for round-trip tests.
package fuzzer

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/randfill"

	"rekey.io/rekey/pkg/apis/attestation"
)

// Funcs returns the fuzzer functions of the attestation group.
var Funcs = func(runtimeserializer.CodecFactory) []interface{} {
	return []interface{}{
		func(spec *attestation.AttestationPolicySpec, c randfill.Continue) {
			c.FillNoCustom(spec)
			// What v1alpha1 defaulting produces.
			if spec.ChallengeLifetime == nil {
				spec.ChallengeLifetime = &metav1.Duration{Duration: 5 * time.Minute}
			}
			if spec.MaxAttemptsPerEKPerHour == nil {
				spec.MaxAttemptsPerEKPerHour = ptr.To[int32](10)
			}
			if spec.PCRPolicy.Bank == "" {
				spec.PCRPolicy.Bank = "sha256"
			}
			if spec.PCRPolicy.Mode == "" {
				spec.PCRPolicy.Mode = attestation.PCRModeTrustOnFirstUse
			}
		},
		func(status *attestation.NodeAttestationStatus, c randfill.Continue) {
			c.FillNoCustom(status)
			if len(status.Conditions) == 0 {
				status.Conditions = nil
			}
		},
	}
}
