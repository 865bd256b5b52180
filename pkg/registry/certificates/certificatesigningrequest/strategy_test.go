package certificatesigningrequest

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	clocktesting "k8s.io/utils/clock/testing"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/test/fixtures"
)

var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func testStrategy() csrStrategy {
	return NewStrategy(runtime.NewScheme(), clocktesting.NewFakePassiveClock(now))
}

func newCSR(t *testing.T) *certificates.CertificateSigningRequest {
	return &certificates.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "req", ResourceVersion: "1"},
		Spec: certificates.CertificateSigningRequestSpec{
			Request:    fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "alice"}),
			SignerName: "example.com/signer",
			Usages:     []certificates.KeyUsage{certificates.UsageClientAuth},
		},
	}
}

func TestPrepareForCreateStampsIdentityFromTheAuthenticatedUser(t *testing.T) {
	csr := newCSR(t)
	// What the body claims must be ignored.
	csr.Spec.Username = "system:admin"
	csr.Spec.UID = "forged"
	csr.Spec.Groups = []string{"system:masters"}
	csr.Spec.Extra = map[string]certificates.ExtraValue{"scopes": {"all"}}
	csr.Status.Conditions = []certificates.CertificateSigningRequestCondition{{Type: "Approved", Status: "True"}}
	csr.Status.Certificate = []byte("x")

	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{
		Name: "bob", UID: "uid-1", Groups: []string{"devs", "system:authenticated"},
		Extra: map[string][]string{"team": {"red"}},
	})
	testStrategy().PrepareForCreate(ctx, csr)

	if csr.Spec.Username != "bob" || csr.Spec.UID != "uid-1" {
		t.Errorf("identity = %q/%q, want bob/uid-1", csr.Spec.Username, csr.Spec.UID)
	}
	if len(csr.Spec.Groups) != 2 || csr.Spec.Groups[0] != "devs" || csr.Spec.Groups[1] != "system:authenticated" {
		t.Errorf("groups = %v", csr.Spec.Groups)
	}
	if len(csr.Spec.Extra) != 1 || csr.Spec.Extra["team"][0] != "red" {
		t.Errorf("extra = %v", csr.Spec.Extra)
	}
	if len(csr.Status.Conditions) != 0 || len(csr.Status.Certificate) != 0 {
		t.Errorf("status not cleared: %+v", csr.Status)
	}
}

func TestPrepareForCreateWithoutUserClearsIdentity(t *testing.T) {
	csr := newCSR(t)
	csr.Spec.Username, csr.Spec.Groups = "system:admin", []string{"system:masters"}
	testStrategy().PrepareForCreate(context.Background(), csr)
	if csr.Spec.Username != "" || csr.Spec.Groups != nil {
		t.Errorf("identity from the body survived: %q %v", csr.Spec.Username, csr.Spec.Groups)
	}
}

func TestMainResourceUpdateKeepsSpecAndStatus(t *testing.T) {
	old := newCSR(t)
	old.Spec.Username = "bob"
	updated := old.DeepCopy()
	updated.Labels = map[string]string{"team": "red"}
	updated.Spec.SignerName = "evil.com/signer"
	updated.Spec.Username = "system:admin"
	updated.Status.Conditions = []certificates.CertificateSigningRequestCondition{{Type: "Approved", Status: "True"}}
	updated.Status.Certificate = fixtures.SelfSignedCertPEM(t, "x")

	s := testStrategy()
	s.PrepareForUpdate(context.Background(), updated, old)
	if updated.Spec.SignerName != "example.com/signer" || updated.Spec.Username != "bob" {
		t.Errorf("spec changed through the main resource: %+v", updated.Spec)
	}
	if len(updated.Status.Conditions) != 0 || len(updated.Status.Certificate) != 0 {
		t.Errorf("status changed through the main resource: %+v", updated.Status)
	}
	if updated.Labels["team"] != "red" {
		t.Errorf("metadata change lost")
	}
	if errs := s.ValidateUpdate(context.Background(), updated, old); len(errs) != 0 {
		t.Errorf("metadata-only update refused: %v", errs)
	}
}

func TestStatusStrategyPreservesApprovalConditions(t *testing.T) {
	old := newCSR(t)
	approvedAt := metav1.NewTime(now.Add(-time.Hour))
	old.Status.Conditions = []certificates.CertificateSigningRequestCondition{{
		Type: "Approved", Status: "True", Reason: "ByAdmin", LastUpdateTime: approvedAt, LastTransitionTime: approvedAt,
	}}
	updated := old.DeepCopy()
	updated.Spec.SignerName = "evil.com/signer"
	updated.Status.Conditions[0].Reason = "Rewritten"
	updated.Status.Conditions = append(updated.Status.Conditions, certificates.CertificateSigningRequestCondition{Type: "Failed", Status: "True", Reason: "Broken"})

	s := NewStatusStrategy(testStrategy())
	s.PrepareForUpdate(context.Background(), updated, old)
	if updated.Spec.SignerName != "example.com/signer" {
		t.Errorf("spec changed through /status")
	}
	if got := updated.Status.Conditions[0]; got.Reason != "ByAdmin" || !got.LastUpdateTime.Equal(&approvedAt) {
		t.Errorf("Approved condition rewritten through /status: %+v", got)
	}
	failed := updated.Status.Conditions[1]
	if !failed.LastUpdateTime.Time.Equal(now) || !failed.LastTransitionTime.Time.Equal(now) {
		t.Errorf("Failed condition times not stamped: %+v", failed)
	}
	if errs := s.ValidateUpdate(context.Background(), updated, old); len(errs) != 0 {
		t.Errorf("refused: %v", errs)
	}
}

func TestStatusStrategyRefusesApproval(t *testing.T) {
	old := newCSR(t)
	updated := old.DeepCopy()
	updated.Status.Conditions = []certificates.CertificateSigningRequestCondition{{Type: "Approved", Status: "True"}}
	s := NewStatusStrategy(testStrategy())
	s.PrepareForUpdate(context.Background(), updated, old)
	if errs := s.ValidateUpdate(context.Background(), updated, old); len(errs) == 0 {
		t.Fatal("Approved added through /status was accepted")
	}
}

func TestApprovalStrategyAddsConditionsOnly(t *testing.T) {
	old := newCSR(t)
	updated := old.DeepCopy()
	updated.Spec.Usages = []certificates.KeyUsage{certificates.UsageAny}
	updated.Status.Conditions = []certificates.CertificateSigningRequestCondition{{Type: "Approved", Status: "True", Reason: "OK"}}

	s := NewApprovalStrategy(testStrategy())
	s.PrepareForUpdate(context.Background(), updated, old)
	if updated.Spec.Usages[0] != certificates.UsageClientAuth {
		t.Errorf("spec changed through /approval")
	}
	if c := updated.Status.Conditions[0]; !c.LastUpdateTime.Time.Equal(now) || !c.LastTransitionTime.Time.Equal(now) {
		t.Errorf("times not stamped: %+v", c)
	}
	if errs := s.ValidateUpdate(context.Background(), updated, old); len(errs) != 0 {
		t.Errorf("refused: %v", errs)
	}

	// A later update keeps the times of an unchanged condition, whatever
	// the writer sent.
	later := updated.DeepCopy()
	later.Status.Conditions[0].LastUpdateTime = metav1.Time{}
	later.Status.Conditions[0].LastTransitionTime = metav1.Time{}
	s2 := NewApprovalStrategy(NewStrategy(runtime.NewScheme(), clocktesting.NewFakePassiveClock(now.Add(time.Hour))))
	s2.PrepareForUpdate(context.Background(), later, updated)
	if c := later.Status.Conditions[0]; !c.LastTransitionTime.Time.Equal(now) || !c.LastUpdateTime.Time.Equal(now) {
		t.Errorf("times of an unchanged condition not kept: %+v", c)
	}
}

// TestConditionTimesAreTheServers: a writer's timestamps are never stored.
// A Failed condition dated 1970 would otherwise make the cleaner delete the
// request at once.
func TestConditionTimesAreTheServers(t *testing.T) {
	epoch := metav1.NewTime(time.Unix(0, 0))
	old := newCSR(t)
	old.Status.Conditions = []certificates.CertificateSigningRequestCondition{{Type: "Approved", Status: "True", Reason: "OK",
		LastUpdateTime: metav1.NewTime(now.Add(-time.Hour)), LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}
	updated := old.DeepCopy()
	updated.Status.Conditions[0].LastUpdateTime, updated.Status.Conditions[0].LastTransitionTime = epoch, epoch
	updated.Status.Conditions = append(updated.Status.Conditions, certificates.CertificateSigningRequestCondition{
		Type: "Failed", Status: "True", Reason: "Broken", LastUpdateTime: epoch, LastTransitionTime: epoch})

	s := NewStatusStrategy(testStrategy())
	s.PrepareForUpdate(context.Background(), updated, old)
	approved, failed := updated.Status.Conditions[0], updated.Status.Conditions[1]
	if !approved.LastUpdateTime.Time.Equal(now.Add(-time.Hour)) || !approved.LastTransitionTime.Time.Equal(now.Add(-time.Hour)) {
		t.Errorf("stored Approved times were rewritten: %+v", approved)
	}
	if !failed.LastUpdateTime.Time.Equal(now) || !failed.LastTransitionTime.Time.Equal(now) {
		t.Errorf("Failed times are the writer's, not the server's: %+v", failed)
	}
}

// TestSubresourcesKeepMetadata: /approval and /status change conditions
// (and the certificate), never labels, annotations, finalizers or owners.
func TestSubresourcesKeepMetadata(t *testing.T) {
	for name, s := range map[string]interface {
		PrepareForUpdate(ctx context.Context, obj, old runtime.Object)
	}{
		"/approval": NewApprovalStrategy(testStrategy()),
		"/status":   NewStatusStrategy(testStrategy()),
	} {
		t.Run(name, func(t *testing.T) {
			old := newCSR(t)
			old.Labels = map[string]string{"team": "a"}
			old.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "old"}}
			updated := old.DeepCopy()
			updated.Labels = map[string]string{"team": "b"}
			updated.Annotations = map[string]string{"x": "y"}
			updated.Finalizers = []string{"example.com/block-delete"}
			updated.OwnerReferences = []metav1.OwnerReference{{Name: "victim"}}
			updated.Generation = 42
			updated.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "approver"}}
			s.PrepareForUpdate(context.Background(), updated, old)
			if updated.Labels["team"] != "a" || updated.Annotations != nil || updated.Finalizers != nil || updated.OwnerReferences != nil || updated.Generation != old.Generation {
				t.Errorf("metadata changed through %s: %+v", name, updated.ObjectMeta)
			}
			if len(updated.ManagedFields) != 1 || updated.ManagedFields[0].Manager != "approver" {
				t.Errorf("managed fields of this write were dropped: %+v", updated.ManagedFields)
			}
		})
	}
}

func TestResetFields(t *testing.T) {
	base := testStrategy()
	main := base.GetResetFields()[apiVersion].String()
	status := NewStatusStrategy(base).GetResetFields()[apiVersion].String()
	approval := NewApprovalStrategy(base).GetResetFields()[apiVersion].String()
	if main != ".status" {
		t.Errorf("main resource resets %s, want .status", main)
	}
	if status != ".spec" {
		t.Errorf("/status resets %s, want .spec", status)
	}
	if approval != ".spec\n.status.certificate" {
		t.Errorf("/approval resets %q, want .spec and .status.certificate", approval)
	}
}

func TestSelectableFieldsIncludeSignerName(t *testing.T) {
	csr := newCSR(t)
	f := SelectableFields(csr)
	if f["spec.signerName"] != "example.com/signer" || f["metadata.name"] != "req" {
		t.Errorf("fields = %v", f)
	}
}

func TestConditionSummary(t *testing.T) {
	csr := newCSR(t)
	if got := ConditionSummary(csr); got != "Pending" {
		t.Errorf("got %q", got)
	}
	csr.Status.Conditions = []certificates.CertificateSigningRequestCondition{{Type: "Approved", Status: "True"}}
	csr.Status.Certificate = []byte("x")
	if got := ConditionSummary(csr); got != "Approved,Issued" {
		t.Errorf("got %q", got)
	}
}
