package signer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics/testutil"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/test/fixtures"
)

// tokenKeyFixture is a fixture whose Signer's CA (bound, Ready) has
// purpose ServiceAccountTokens.
func tokenKeyFixture(t *testing.T, p certv1alpha1.SignerPolicy) *fixture {
	t.Helper()
	f := newFixture(t, p, true)
	obj, ok, err := f.cas.GetByKey("team-ca")
	if err != nil || !ok {
		t.Fatalf("the fixture's CA: %v %v", ok, err)
	}
	ca := obj.(*rotationv1alpha1.CertificateAuthority).DeepCopy()
	ca.Spec.Purpose = rotationv1alpha1.PurposeServiceAccountTokens
	if err := f.cas.Update(ca); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSignerOfATokenKeyIsNotReady: a Signer whose CA signs service-account
// tokens is Ready=False with a reason and a message naming the CA and its
// purpose.
func TestSignerOfATokenKeyIsNotReady(t *testing.T) {
	RegisterMetrics()
	f := tokenKeyFixture(t, certv1alpha1.SignerPolicy{})
	s, err := f.c.signers.Get(validation.SignerObjectName("example.com/team"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.handleSigner(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	actions := f.client.Actions()
	if len(actions) != 1 || actions[0].GetSubresource() != "status" {
		t.Fatalf("actions %v, want one status update", actions)
	}
	c := actions[0].(k8stesting.UpdateAction).GetObject().(*certv1alpha1.Signer).Status.Conditions[0]
	if c.Type != certv1alpha1.SignerReady || c.Status != metav1.ConditionFalse || c.Reason != ReasonCANotForCertificates ||
		!strings.Contains(c.Message, `CertificateAuthority "team-ca" issues no certificates`) || !strings.Contains(c.Message, "spec.purpose ServiceAccountTokens") ||
		!strings.Contains(c.Message, "example.com/team") {
		t.Fatalf("condition %+v", c)
	}
	if v, err := testutil.GetGaugeMetricValue(signerReady.WithLabelValues("example.com/team")); err != nil || v != 0 {
		t.Errorf("rekey_signer_ready = %v, %v, want 0", v, err)
	}
}

// TestTokenKeyIssuesNoCertificate: Signing refuses to issue with a token
// key (an error saying why, no record), and the signer controller leaves
// the approved request waiting, untouched.
func TestTokenKeyIssuesNoCertificate(t *testing.T) {
	p := certv1alpha1.SignerPolicy{AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth}, MaxDuration: metav1.Duration{Duration: time.Hour}}
	f := tokenKeyFixture(t, p)
	csr := approvedCSR(t, "example.com/team", fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "alice"}), certv1alpha1.UsageClientAuth)
	s, err := f.c.signers.Get(validation.SignerObjectName("example.com/team"))
	if err != nil {
		t.Fatal(err)
	}
	signed, err := f.c.signing.Sign(context.Background(), s, csr, time.Time{}, authority.PathController)
	if !errors.Is(err, authority.ErrNotForCertificates) || !strings.Contains(err.Error(), `CertificateAuthority "team-ca"`) || signed.Certificate != nil {
		t.Fatalf("Sign with a token key: %+v, %v", signed, err)
	}
	if err := f.c.Handle(context.Background(), csr); err != nil {
		t.Fatalf("the request should wait, not fail the sync: %v", err)
	}
	if a := f.client.Actions(); len(a) != 0 {
		t.Fatalf("the request was written: %v", a)
	}
	if len(f.recorder.records) != 0 {
		t.Fatalf("issuance recorded: %+v", f.recorder.records)
	}
}
