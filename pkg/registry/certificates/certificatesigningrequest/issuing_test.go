package certificatesigningrequest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
	clocktesting "k8s.io/utils/clock/testing"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/issuer"
)

// fakeIssuer counts what it is asked and answers with a fixed outcome.
type fakeIssuer struct {
	outcome            issuer.Outcome
	err                error
	approvals, creates int
}

func (f *fakeIssuer) AtApproval(context.Context, *certificates.CertificateSigningRequest, time.Time) (issuer.Outcome, error) {
	f.approvals++
	return f.outcome, f.err
}

func (f *fakeIssuer) AtCreate(context.Context, *certificates.CertificateSigningRequest) (issuer.Outcome, error) {
	f.creates++
	return f.outcome, f.err
}

// recordingStorage keeps what was written. Its GuaranteedUpdate calls
// tryUpdate once per element of existing, as etcd does on conflicts.
type recordingStorage struct {
	storage.Interface
	existing []runtime.Object
	written  runtime.Object
	// stored is what Get finds (nil: nothing under the key).
	stored *certificates.CertificateSigningRequest
}

func (s *recordingStorage) Get(_ context.Context, _ string, opts storage.GetOptions, out runtime.Object) error {
	if s.stored == nil {
		if opts.IgnoreNotFound {
			return nil
		}
		return storage.NewKeyNotFoundError("k", 0)
	}
	s.stored.DeepCopyInto(out.(*certificates.CertificateSigningRequest))
	return nil
}

func (s *recordingStorage) Create(_ context.Context, _ string, obj, _ runtime.Object, _ uint64) error {
	s.written = obj
	return nil
}

func (s *recordingStorage) GuaranteedUpdate(_ context.Context, _ string, _ runtime.Object, _ bool, _ *storage.Preconditions, tryUpdate storage.UpdateFunc, _ runtime.Object) error {
	for _, existing := range s.existing {
		obj, _, err := tryUpdate(existing, storage.ResponseMeta{})
		if err != nil {
			return err
		}
		s.written = obj
	}
	return nil
}

func approvedCSR(t *testing.T) *certificates.CertificateSigningRequest {
	csr := newCSR(t)
	csr.UID = "uid-1"
	csr.Status.Conditions = []certificates.CertificateSigningRequestCondition{{Type: certificates.CertificateApproved, Status: metav1.ConditionTrue, Reason: "Test"}}
	return csr
}

// update runs one approval write through the decorator: tryUpdate stands
// for the generic store (objInfo, strategy, then validation, which the
// write wrapper marks admitted when allowed).
func update(t *testing.T, s *issuingStorage, withWriteContext, admit bool, newObj func() *certificates.CertificateSigningRequest) (runtime.Object, error) {
	ctx := context.Background()
	validate := func(context.Context, runtime.Object, runtime.Object) error {
		if !admit {
			return errors.New("forbidden by admission")
		}
		return nil
	}
	if withWriteContext {
		var w *write
		ctx, w = withWrite(ctx)
		wrapped := w.afterUpdateValidation(validate)
		validate = wrapped
	}
	err := s.GuaranteedUpdate(ctx, "k", &certificates.CertificateSigningRequest{}, false, nil, func(existing runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
		obj := newObj()
		if err := validate(ctx, obj.DeepCopyObject(), existing); err != nil {
			return nil, nil, err
		}
		return obj, nil, nil
	}, nil)
	return s.Interface.(*recordingStorage).written, err
}

func TestApprovalWriteCarriesTheCertificate(t *testing.T) {
	pending := newCSR(t)
	pending.UID = "uid-1"
	certPEM := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	newStorage := func(iss *fakeIssuer, existing ...runtime.Object) *issuingStorage {
		return &issuingStorage{Interface: &recordingStorage{existing: existing}, issuer: iss, clock: clocktesting.NewFakePassiveClock(now)}
	}

	t.Run("signed in the write, owned by rekey-signer", func(t *testing.T) {
		iss := &fakeIssuer{outcome: issuer.Outcome{Certificate: certPEM}}
		written, err := update(t, newStorage(iss, pending), true, true, func() *certificates.CertificateSigningRequest { return approvedCSR(t) })
		if err != nil {
			t.Fatal(err)
		}
		csr := written.(*certificates.CertificateSigningRequest)
		if string(csr.Status.Certificate) != string(certPEM) || iss.approvals != 1 {
			t.Fatalf("certificate %q after %d decisions", csr.Status.Certificate, iss.approvals)
		}
		mf := csr.ManagedFields
		if len(mf) != 1 || mf[0].Manager != "rekey-signer" || mf[0].Subresource != "status" || !strings.Contains(mf[0].FieldsV1.GetRawString(), `"f:certificate"`) {
			t.Fatalf("managed fields %+v, want rekey-signer owning status.certificate", mf)
		}
	})
	t.Run("a conflict retry does not sign again", func(t *testing.T) {
		iss := &fakeIssuer{outcome: issuer.Outcome{Certificate: certPEM}}
		written, err := update(t, newStorage(iss, pending, pending.DeepCopy()), true, true, func() *certificates.CertificateSigningRequest { return approvedCSR(t) })
		if err != nil {
			t.Fatal(err)
		}
		if iss.approvals != 1 || string(written.(*certificates.CertificateSigningRequest).Status.Certificate) != string(certPEM) {
			t.Fatalf("%d decisions for two attempts of one write, want 1", iss.approvals)
		}
	})
	t.Run("a retry that finds a certificate stored keeps it", func(t *testing.T) {
		signed := approvedCSR(t)
		signed.Status.Certificate = []byte("stored")
		iss := &fakeIssuer{outcome: issuer.Outcome{Certificate: certPEM}}
		written, err := update(t, newStorage(iss, pending, signed), true, true, func() *certificates.CertificateSigningRequest {
			csr := approvedCSR(t)
			csr.Status.Certificate = []byte("stored") // the approval strategy keeps the stored certificate
			return csr
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(written.(*certificates.CertificateSigningRequest).Status.Certificate); got != "stored" {
			t.Fatalf("certificate %q, want the stored one", got)
		}
	})
	t.Run("nothing is asked before admission allows the write", func(t *testing.T) {
		iss := &fakeIssuer{outcome: issuer.Outcome{Certificate: certPEM}}
		if _, err := update(t, newStorage(iss, pending), true, false, func() *certificates.CertificateSigningRequest { return approvedCSR(t) }); err == nil {
			t.Fatal("write allowed")
		}
		if iss.approvals != 0 {
			t.Fatal("the issuer was asked for a write admission refused")
		}
	})
	t.Run("writes the REST did not mark pass through", func(t *testing.T) {
		iss := &fakeIssuer{outcome: issuer.Outcome{Certificate: certPEM}}
		written, err := update(t, newStorage(iss, pending), false, true, func() *certificates.CertificateSigningRequest { return approvedCSR(t) })
		if err != nil || iss.approvals != 0 || len(written.(*certificates.CertificateSigningRequest).Status.Certificate) != 0 {
			t.Fatalf("unmarked write: err %v, %d decisions", err, iss.approvals)
		}
	})
	t.Run("a denial is not signed", func(t *testing.T) {
		iss := &fakeIssuer{outcome: issuer.Outcome{Certificate: certPEM}}
		_, err := update(t, newStorage(iss, pending), true, true, func() *certificates.CertificateSigningRequest {
			csr := newCSR(t)
			csr.Status.Conditions = []certificates.CertificateSigningRequestCondition{{Type: certificates.CertificateDenied, Status: metav1.ConditionTrue}}
			return csr
		})
		if err != nil || iss.approvals != 0 {
			t.Fatalf("denial: err %v, %d decisions", err, iss.approvals)
		}
	})
	t.Run("a policy failure is stored as Failed", func(t *testing.T) {
		iss := &fakeIssuer{outcome: issuer.Outcome{Failure: &issuer.Decision{Reason: "SignerPolicyViolation", Message: "policy.allowedUsages"}}}
		written, err := update(t, newStorage(iss, pending), true, true, func() *certificates.CertificateSigningRequest { return approvedCSR(t) })
		if err != nil {
			t.Fatal(err)
		}
		failed := certificates.GetCondition(written.(*certificates.CertificateSigningRequest), certificates.CertificateFailed)
		if failed == nil || failed.Reason != "SignerPolicyViolation" || !failed.LastUpdateTime.Time.Equal(now) {
			t.Fatalf("Failed condition %+v", failed)
		}
	})
	t.Run("an issuer error fails the write", func(t *testing.T) {
		iss := &fakeIssuer{err: errors.New("forbidden")}
		if _, err := update(t, newStorage(iss, pending), true, true, func() *certificates.CertificateSigningRequest { return approvedCSR(t) }); err == nil {
			t.Fatal("write stored despite the issuer's error")
		}
	})
}

func TestCreateWriteCarriesApprovalAndCertificate(t *testing.T) {
	iss := &fakeIssuer{outcome: issuer.Outcome{Approval: &issuer.Decision{Reason: issuer.ReasonAutoApproved, Message: "checked"}, Certificate: []byte("cert")}}
	inner := &recordingStorage{}
	s := &issuingStorage{Interface: inner, issuer: iss, clock: clocktesting.NewFakePassiveClock(now)}

	// Unmarked, or marked but not admitted: stored as sent.
	if err := s.Create(context.Background(), "k", newCSR(t), nil, 0); err != nil || iss.creates != 0 {
		t.Fatalf("unmarked create: err %v, %d decisions", err, iss.creates)
	}
	ctx, w := withWrite(context.Background())
	if err := s.Create(ctx, "k", newCSR(t), nil, 0); err != nil || iss.creates != 0 {
		t.Fatalf("create not admitted: err %v, %d decisions", err, iss.creates)
	}

	if err := w.afterCreateValidation(nil)(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, "k", newCSR(t), nil, 0); err != nil {
		t.Fatal(err)
	}
	csr := inner.written.(*certificates.CertificateSigningRequest)
	approved := certificates.GetCondition(csr, certificates.CertificateApproved)
	if approved == nil || approved.Reason != issuer.ReasonAutoApproved || string(csr.Status.Certificate) != "cert" || State(csr) != "Issued" {
		t.Fatalf("stored %+v", csr.Status)
	}
	// A create under a name that is taken is not decided: it will fail.
	inner.stored = newCSR(t)
	if err := w.afterCreateValidation(nil)(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, "k", newCSR(t), nil, 0); err != nil || iss.creates != 1 {
		t.Fatalf("create of a taken name: err %v, %d decisions, want still 1", err, iss.creates)
	}

	managers := map[string]string{}
	for _, e := range csr.ManagedFields {
		managers[e.Manager] = e.FieldsV1.GetRawString()
	}
	if !strings.Contains(managers["rekey-approver"], `k:{\"type\":\"Approved\"}`) || !strings.Contains(managers["rekey-signer"], "f:certificate") {
		t.Fatalf("managed fields %v", managers)
	}
}

// failingGet is storage whose reads fail.
type failingGet struct{ recordingStorage }

func (s *failingGet) Get(context.Context, string, storage.GetOptions, runtime.Object) error {
	return errors.New("etcd unavailable")
}

// TestGrantedCreateStoresOnlyWhatWasDecided: a create through selfnodeclient
// or nodeclient that is not decided (the name is taken, or whether it is
// cannot be read) is refused here rather than stored pending, since its
// permission is not the main resource's "create".
func TestGrantedCreateStoresOnlyWhatWasDecided(t *testing.T) {
	iss := &fakeIssuer{outcome: issuer.Outcome{Approval: &issuer.Decision{Reason: issuer.ReasonAutoApproved, Message: "checked"}, Certificate: []byte("cert")}}
	inner := &recordingStorage{stored: newCSR(t)}
	s := &issuingStorage{Interface: inner, issuer: iss, clock: clocktesting.NewFakePassiveClock(now)}
	ctx, w := withWrite(issuer.WithNodeClientGrant(context.Background(), issuer.SubresourceSelfNodeClient))
	if err := w.afterCreateValidation(nil)(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, "k", newCSR(t), nil, 0); !apierrors.IsAlreadyExists(err) || iss.creates != 0 || inner.written != nil {
		t.Fatalf("taken name: err %v, %d decisions, written %v", err, iss.creates, inner.written)
	}

	failing := &failingGet{}
	s = &issuingStorage{Interface: failing, issuer: iss, clock: clocktesting.NewFakePassiveClock(now)}
	if err := w.afterCreateValidation(nil)(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, "k", newCSR(t), nil, 0); !apierrors.IsServiceUnavailable(err) || iss.creates != 0 || failing.written != nil {
		t.Fatalf("unreadable: err %v, %d decisions, written %v", err, iss.creates, failing.written)
	}
	// The main resource's create passes through when it cannot tell, and
	// the store decides (as before).
	plain, pw := withWrite(context.Background())
	if err := pw.afterCreateValidation(nil)(plain, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(plain, "k", newCSR(t), nil, 0); err != nil || iss.creates != 0 || failing.written == nil {
		t.Fatalf("main create: err %v, %d decisions", err, iss.creates)
	}
}

func TestState(t *testing.T) {
	csr := newCSR(t)
	steps := []struct {
		change func()
		want   string
	}{
		{func() {}, "Pending"},
		{func() {
			csr.Status.Conditions = append(csr.Status.Conditions, certificates.CertificateSigningRequestCondition{Type: certificates.CertificateApproved})
		}, "Approved"},
		{func() { csr.Status.Certificate = []byte("c") }, "Issued"},
		{func() {
			csr.Status.Certificate = nil
			csr.Status.Conditions = append(csr.Status.Conditions, certificates.CertificateSigningRequestCondition{Type: certificates.CertificateFailed})
		}, "Failed"},
		{func() {
			csr.Status.Conditions = []certificates.CertificateSigningRequestCondition{{Type: certificates.CertificateDenied}}
		}, "Denied"},
	}
	for _, s := range steps {
		s.change()
		if got := State(csr); got != s.want {
			t.Errorf("State = %s, want %s (status %+v)", got, s.want, csr.Status)
		}
		if got := SelectableFields(csr)["state"]; got != s.want {
			t.Errorf("selectable state = %s, want %s", got, s.want)
		}
	}
}

// An attestation refused at create is stored as an Attested=False
// condition of the pending request; one that passed, as Attested=True
// beside Approved. Both are the approver's in managedFields.
func TestCreateWriteCarriesTheAttestation(t *testing.T) {
	for _, passed := range []bool{true, false} {
		out := issuer.Outcome{Attestation: &issuer.Attestation{Passed: passed, Decision: issuer.Decision{Reason: "R", Message: "M"}}}
		if passed {
			out.Approval, out.Certificate = &issuer.Decision{Reason: issuer.ReasonAutoApproved}, []byte("cert")
		}
		inner := &recordingStorage{}
		s := &issuingStorage{Interface: inner, issuer: &fakeIssuer{outcome: out}, clock: clocktesting.NewFakePassiveClock(now)}
		ctx, w := withWrite(context.Background())
		if err := w.afterCreateValidation(nil)(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Create(ctx, "k", newCSR(t), nil, 0); err != nil {
			t.Fatal(err)
		}
		csr := inner.written.(*certificates.CertificateSigningRequest)
		c := certificates.GetCondition(csr, certificates.CertificateAttested)
		want := metav1.ConditionFalse
		if passed {
			want = metav1.ConditionTrue
		}
		if c == nil || c.Status != want || c.Reason != "R" || c.Message != "M" || (certificates.GetCondition(csr, certificates.CertificateApproved) != nil) != passed {
			t.Fatalf("passed=%v: stored %+v", passed, csr.Status)
		}
		owned := false
		for _, e := range csr.ManagedFields {
			owned = owned || e.Manager == "rekey-approver" && strings.Contains(e.FieldsV1.GetRawString(), `k:{\"type\":\"Attested\"}`)
		}
		if !owned {
			t.Fatalf("passed=%v: managed fields %+v", passed, csr.ManagedFields)
		}
	}
}

// TestStoredMessagesPassValidation: every condition an outcome adds
// (Attested, Approved, Failed) has a message validation accepts, however
// long the decision's (one quoting a 20,000-character subject attribute),
// so that later writes of the request (a person's Deny) are not refused.
func TestStoredMessagesPassValidation(t *testing.T) {
	huge := issuer.Decision{Reason: "R", Message: strings.Repeat("é", 20000)}
	for name, out := range map[string]issuer.Outcome{
		"attested and approved":  {Attestation: &issuer.Attestation{Passed: true, Decision: huge}, Approval: &huge, Certificate: []byte("cert")},
		"refused at attestation": {Attestation: &issuer.Attestation{Decision: huge}},
		"approved and failed":    {Approval: &huge, Failure: &huge},
	} {
		t.Run(name, func(t *testing.T) {
			inner := &recordingStorage{}
			s := &issuingStorage{Interface: inner, issuer: &fakeIssuer{outcome: out}, clock: clocktesting.NewFakePassiveClock(now)}
			ctx, w := withWrite(context.Background())
			if err := w.afterCreateValidation(nil)(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if err := s.Create(ctx, "k", newCSR(t), nil, 0); err != nil {
				t.Fatal(err)
			}
			csr := inner.written.(*certificates.CertificateSigningRequest)
			if len(csr.Status.Conditions) == 0 {
				t.Fatal("nothing stored")
			}
			if errs := validation.ValidateCertificateSigningRequestStatusUpdate(csr, csr); len(errs) > 0 {
				t.Fatalf("the stored request fails validation on its next write: %v", errs)
			}
		})
	}
}
