package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"rekey.io/rekey/pkg/apis/attestation"
)

func policy() *attestation.AttestationPolicy {
	return &attestation.AttestationPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: attestation.AttestationPolicySpec{
			AllowedEKPublicKeyHashes: []string{strings.Repeat("ab", 32)},
			PCRPolicy:                attestation.PCRPolicy{Bank: "sha256", Mode: attestation.PCRModeFixed, Selection: []int32{0, 7}, Values: []attestation.PCRValue{{Index: 0, Value: strings.Repeat("00", 32)}, {Index: 7, Value: strings.Repeat("11", 32)}}},
			SignerNames:              []string{"rekey.io/kube-apiserver-client-kubelet-tpm"},
			ChallengeLifetime:        &metav1.Duration{Duration: 5 * time.Minute},
			MaxAttemptsPerEKPerHour:  ptr.To[int32](10),
		},
	}
}

func TestValidateAttestationPolicy(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*attestation.AttestationPolicySpec)
		field  string
	}{
		"valid": {func(*attestation.AttestationPolicySpec) {}, ""},
		"duplicate hash": {func(s *attestation.AttestationPolicySpec) {
			s.AllowedEKPublicKeyHashes = append(s.AllowedEKPublicKeyHashes, s.AllowedEKPublicKeyHashes[0])
		}, "spec.allowedEKPublicKeyHashes[1]"},
		"short hash":         {func(s *attestation.AttestationPolicySpec) { s.AllowedEKPublicKeyHashes = []string{"ab"} }, "spec.allowedEKPublicKeyHashes[0]"},
		"sha1 bank":          {func(s *attestation.AttestationPolicySpec) { s.PCRPolicy.Bank = "sha1" }, "spec.pcrPolicy.bank"},
		"unknown mode":       {func(s *attestation.AttestationPolicySpec) { s.PCRPolicy.Mode = "Sometimes" }, "spec.pcrPolicy.mode"},
		"empty selection":    {func(s *attestation.AttestationPolicySpec) { s.PCRPolicy.Selection, s.PCRPolicy.Values = nil, nil }, "spec.pcrPolicy.selection"},
		"duplicate PCR":      {func(s *attestation.AttestationPolicySpec) { s.PCRPolicy.Selection = []int32{0, 7, 7} }, "spec.pcrPolicy.selection[2]"},
		"value not selected": {func(s *attestation.AttestationPolicySpec) { s.PCRPolicy.Values[1].Index = 8 }, "spec.pcrPolicy.values[1].index"},
		"bad value":          {func(s *attestation.AttestationPolicySpec) { s.PCRPolicy.Values[0].Value = "zz" }, "spec.pcrPolicy.values[0].value"},
		"values with TOFU":   {func(s *attestation.AttestationPolicySpec) { s.PCRPolicy.Mode = attestation.PCRModeTrustOnFirstUse }, "spec.pcrPolicy.values"},
		"no signers":         {func(s *attestation.AttestationPolicySpec) { s.SignerNames = nil }, "spec.signerNames"},
		"bad signer name":    {func(s *attestation.AttestationPolicySpec) { s.SignerNames = []string{"no-domain"} }, "spec.signerNames[0]"},
		"short challenge":    {func(s *attestation.AttestationPolicySpec) { s.ChallengeLifetime.Duration = time.Second }, "spec.challengeLifetime"},
		"no attempts":        {func(s *attestation.AttestationPolicySpec) { s.MaxAttemptsPerEKPerHour = ptr.To[int32](0) }, "spec.maxAttemptsPerEKPerHour"},
	} {
		t.Run(name, func(t *testing.T) {
			p := policy()
			tc.mutate(&p.Spec)
			errs := ValidateAttestationPolicy(p)
			if tc.field == "" {
				if len(errs) != 0 {
					t.Fatalf("valid policy refused: %v", errs)
				}
				return
			}
			for _, e := range errs {
				if e.Field == tc.field {
					return
				}
			}
			t.Fatalf("errors %v do not name %s", errs, tc.field)
		})
	}
}
