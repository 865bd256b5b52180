package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// Defaults of an AttestationPolicy.
const (
	DefaultChallengeLifetime       = 5 * time.Minute
	DefaultMaxAttemptsPerEKPerHour = 10
	DefaultPCRBank                 = "sha256"
)

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}

// SetDefaults_AttestationPolicySpec fills the challenge lifetime, the
// attempts, the PCR bank and mode.
func SetDefaults_AttestationPolicySpec(obj *AttestationPolicySpec) {
	if obj.ChallengeLifetime == nil {
		obj.ChallengeLifetime = &metav1.Duration{Duration: DefaultChallengeLifetime}
	}
	if obj.MaxAttemptsPerEKPerHour == nil {
		obj.MaxAttemptsPerEKPerHour = ptr.To[int32](DefaultMaxAttemptsPerEKPerHour)
	}
	if obj.PCRPolicy.Bank == "" {
		obj.PCRPolicy.Bank = DefaultPCRBank
	}
	if obj.PCRPolicy.Mode == "" {
		obj.PCRPolicy.Mode = PCRModeTrustOnFirstUse
	}
}
