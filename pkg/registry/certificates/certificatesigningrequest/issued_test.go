package certificatesigningrequest

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	clocktesting "k8s.io/utils/clock/testing"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/issuer"
	"rekey.io/rekey/pkg/registry/printers"
	"rekey.io/rekey/test/fixtures"
)

// TestIssuedComesWithTheCertificate: a /status write that sets the
// certificate (a controller or an external signer) is stored with an
// Issued condition naming the issuer, serial and expiry; no client adds,
// removes or edits it.
func TestIssuedComesWithTheCertificate(t *testing.T) {
	st := NewStatusStrategy(testStrategy())
	ap := NewApprovalStrategy(testStrategy())
	client := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "signer"})
	certPEM := fixtures.SelfSignedCertPEM(t, "issuing-ca")
	cert := firstCertificate(certPEM)
	if cert == nil {
		t.Fatal("the fixture certificate does not parse")
	}
	approved := func() *certificates.CertificateSigningRequest {
		csr := newCSR(t)
		csr.Status.Conditions = []certificates.CertificateSigningRequestCondition{{Type: certificates.CertificateApproved, Status: metav1.ConditionTrue, Reason: "ByAdmin"}}
		return csr
	}

	old := approved()
	signed := old.DeepCopy()
	signed.Status.Certificate = certPEM
	st.PrepareForUpdate(client, signed, old)
	if errs := st.ValidateUpdate(client, signed, old); len(errs) > 0 {
		t.Fatalf("setting the certificate: %v", errs)
	}
	issued := certificates.GetCondition(signed, certificates.CertificateIssued)
	if issued == nil || issued.Status != metav1.ConditionTrue || issued.Reason != ReasonIssued || !issued.LastTransitionTime.Time.Equal(now) {
		t.Fatalf("Issued after the certificate was set: %+v", issued)
	}
	for _, want := range []string{`issued by "CN=issuing-ca"`, "serial " + printers.SerialHex(cert.SerialNumber), "valid until " + cert.NotAfter.UTC().Format(time.RFC3339)} {
		if !strings.Contains(issued.Message, want) {
			t.Errorf("Issued message %q does not say %q", issued.Message, want)
		}
	}

	t.Run("removed or edited by a client, kept", func(t *testing.T) {
		for _, s := range []struct {
			name    string
			prepare func(n, o *certificates.CertificateSigningRequest)
		}{
			{"status", func(n, o *certificates.CertificateSigningRequest) { st.PrepareForUpdate(client, n, o) }},
			{"approval", func(n, o *certificates.CertificateSigningRequest) { ap.PrepareForUpdate(client, n, o) }},
		} {
			for _, conds := range [][]certificates.CertificateSigningRequestCondition{
				signed.Status.Conditions[:1],
				{signed.Status.Conditions[0], {Type: certificates.CertificateIssued, Status: metav1.ConditionFalse, Reason: "Oops"}},
			} {
				upd := signed.DeepCopy()
				upd.Status.Conditions = conds
				s.prepare(upd, signed)
				if c := certificates.GetCondition(upd, certificates.CertificateIssued); c == nil || *c != *issued {
					t.Fatalf("%s: Issued after a client's write: %+v", s.name, c)
				}
			}
		}
	})
	t.Run("added by a client without a certificate, refused", func(t *testing.T) {
		for name, s := range map[string]interface {
			PrepareForUpdate(context.Context, runtime.Object, runtime.Object)
		}{"status": st, "approval": ap} {
			old := approved()
			upd := old.DeepCopy()
			upd.Status.Conditions = append(upd.Status.Conditions, certificates.CertificateSigningRequestCondition{Type: certificates.CertificateIssued, Status: metav1.ConditionTrue, Reason: "Mine"})
			s.PrepareForUpdate(client, upd, old)
			var errs []error
			if name == "status" {
				errs = st.ValidateUpdate(client, upd, old).ToAggregate().Errors()
			} else {
				errs = ap.ValidateUpdate(client, upd, old).ToAggregate().Errors()
			}
			if len(errs) == 0 || !strings.Contains(errs[0].Error(), `a condition of type "Issued" is recorded by rekey`) {
				t.Fatalf("%s: a client adding Issued: %v", name, errs)
			}
		}
	})
	t.Run("sent by the signer with the certificate, replaced by the server's", func(t *testing.T) {
		old := approved()
		upd := old.DeepCopy()
		upd.Status.Certificate = certPEM
		upd.Status.Conditions = append(upd.Status.Conditions, certificates.CertificateSigningRequestCondition{Type: certificates.CertificateIssued, Status: metav1.ConditionTrue, Reason: "Mine", Message: "trust me"})
		st.PrepareForUpdate(client, upd, old)
		if c := certificates.GetCondition(upd, certificates.CertificateIssued); c == nil || c.Reason != ReasonIssued {
			t.Fatalf("Issued %+v, want the server's", c)
		}
	})
	t.Run("a request issued before the condition existed gets it at its next write", func(t *testing.T) {
		old := approved()
		old.Status.Certificate = certPEM
		upd := old.DeepCopy()
		st.PrepareForUpdate(client, upd, old)
		if certificates.GetCondition(upd, certificates.CertificateIssued) == nil {
			t.Fatal("no Issued on a request with a certificate")
		}
	})
}

// TestIssuedInTheIssuingWrite: a create or an approval that rekey signs in
// the write stores the Issued condition with the certificate, owned by the
// signer's manager as if the signer controller had written it.
func TestIssuedInTheIssuingWrite(t *testing.T) {
	certPEM := fixtures.SelfSignedCertPEM(t, "issuing-ca")
	pending := newCSR(t)
	pending.UID = "uid-1"
	s := &issuingStorage{Interface: &recordingStorage{existing: []runtime.Object{pending}}, issuer: &fakeIssuer{outcome: issuer.Outcome{Certificate: certPEM}},
		clock: clocktesting.NewFakePassiveClock(now)}
	written, err := update(t, s, true, true, func() *certificates.CertificateSigningRequest { return approvedCSR(t) })
	if err != nil {
		t.Fatal(err)
	}
	csr := written.(*certificates.CertificateSigningRequest)
	if c := certificates.GetCondition(csr, certificates.CertificateIssued); c == nil || c.Reason != ReasonIssued || !strings.Contains(c.Message, `issued by "CN=issuing-ca"`) {
		t.Fatalf("Issued in the approval write: %+v", c)
	}
	if mf := csr.ManagedFields; len(mf) != 1 || !strings.Contains(mf[0].FieldsV1.GetRawString(), `k:{\"type\":\"Issued\"}`) {
		t.Fatalf("managed fields %+v, want rekey-signer owning the Issued condition", mf)
	}

	inner := &recordingStorage{}
	s = &issuingStorage{Interface: inner, issuer: &fakeIssuer{outcome: issuer.Outcome{Approval: &issuer.Decision{Reason: issuer.ReasonAutoApproved}, Certificate: certPEM}},
		clock: clocktesting.NewFakePassiveClock(now)}
	ctx, w := withWrite(context.Background())
	if err := w.afterCreateValidation(nil)(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, "k", newCSR(t), nil, 0); err != nil {
		t.Fatal(err)
	}
	if certificates.GetCondition(inner.written.(*certificates.CertificateSigningRequest), certificates.CertificateIssued) == nil {
		t.Fatal("no Issued in the create that issued")
	}
}
