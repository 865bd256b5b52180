package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"rekey.io/rekey/pkg/apis/certificates"
)

// The messages issue #32 asked for: each names its field and says what is
// wrong in words a person at kubectl can act on.

func messageSigner() *certificates.Signer {
	return &certificates.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: "example.com:team", ResourceVersion: "1"},
		Spec: certificates.SignerSpec{
			SignerName:              "example.com/team",
			CertificateAuthorityRef: certificates.CertificateAuthorityReference{Name: "team-ca"},
			Policy: certificates.SignerPolicy{
				AllowedUsages: []certificates.KeyUsage{certificates.UsageClientAuth},
				MaxDuration:   metav1.Duration{Duration: 720 * time.Hour},
			},
			Approval: certificates.SignerApproval{Mode: certificates.ApprovalManual},
		},
	}
}

func TestMissingMaxDurationIsRequired(t *testing.T) {
	s := messageSigner()
	if errs := ValidateSigner(s); len(errs) > 0 {
		t.Fatalf("valid Signer refused: %v", errs)
	}
	s.Spec.Policy.MaxDuration = metav1.Duration{}
	errs := ValidateSigner(s)
	requireError(t, errs, "spec.policy.maxDuration", "Required value: the longest lifetime the signer grants, at least 10m")
	for _, e := range errs {
		if e.Field == "spec.policy.maxDuration" && e.BadValue == "0s" {
			t.Errorf("a missing maxDuration is reported as the value 0s: %v", e)
		}
	}
	s.Spec.Policy.MaxDuration = metav1.Duration{Duration: time.Minute}
	requireError(t, ValidateSigner(s), "spec.policy.maxDuration", `Invalid value: "1m0s": must be at least 10m`)
}

func TestImmutableCertificateAuthorityRefNamesTheName(t *testing.T) {
	old, s := messageSigner(), messageSigner()
	s.Spec.CertificateAuthorityRef.Name = "other-ca"
	errs := ValidateSignerUpdate(s, old)
	requireError(t, errs, "spec.certificateAuthorityRef.name", `Invalid value: "other-ca": field is immutable`)
	assertNoGoStruct(t, errs)
}

func TestImmutableRevocationNamesTheField(t *testing.T) {
	old := &certificates.Revocation{
		ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: "1"},
		Spec:       certificates.RevocationSpec{SerialNumber: "0a", CAName: "team-ca", Reason: certificates.RevocationReasonUnspecified},
	}
	r := old.DeepCopy()
	r.Spec.Reason = certificates.RevocationReasonKeyCompromise
	errs := ValidateRevocationUpdate(r, old)
	requireError(t, errs, "spec.reason", `Invalid value: "KeyCompromise": field is immutable`)
	assertNoGoStruct(t, errs)
}

// assertNoGoStruct: no message prints a Go struct ({"Name":...}).
func assertNoGoStruct(t *testing.T, errs field.ErrorList) {
	t.Helper()
	if msg := errs.ToAggregate().Error(); strings.Contains(msg, `{"`) || strings.Contains(msg, "&{") {
		t.Errorf("the message prints a Go struct: %s", msg)
	}
}
