package cleaner

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	"rekey.io/rekey/pkg/issuance"
)

// TestCleanOnceDeletesOnlyWhatIsDue, by UID, so that a request made again
// under the same name in the meantime survives.
func TestCleanOnceDeletesOnlyWhatIsDue(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	old := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "old", UID: "uid-old", CreationTimestamp: metav1.NewTime(now.Add(-25 * time.Hour))}}
	fresh := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "fresh", UID: "uid-fresh", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))}}
	client := fake.NewSimpleClientset(old, fresh)
	c := NewController(client, clocktesting.NewFakePassiveClock(now), time.Minute)
	c.CleanOnce(context.Background())
	actions := client.Actions()
	if len(actions) != 2 || actions[0].GetVerb() != "list" || actions[1].GetVerb() != "delete" {
		t.Fatalf("actions %v, want a list and one delete", actions)
	}
	if restrictions := actions[0].(k8stesting.ListActionImpl).GetListRestrictions(); !restrictions.Labels.Empty() || !restrictions.Fields.Empty() {
		t.Errorf("listed %+v, want every request", restrictions)
	}
	del := actions[1].(k8stesting.DeleteAction)
	if del.GetName() != "old" || del.GetDeleteOptions().Preconditions == nil || *del.GetDeleteOptions().Preconditions.UID != "uid-old" {
		t.Fatalf("deleted %s with %+v, want old with its UID as precondition", del.GetName(), del.GetDeleteOptions())
	}
}

type fakePruner struct {
	caName string
	drop   func(issuance.Record) bool
	calls  int
}

func (f *fakePruner) Prune(_ context.Context, caName string, drop func(issuance.Record) bool) (int, error) {
	f.calls++
	f.caName, f.drop = caName, drop
	return 0, nil
}

// TestCleanOncePrunesExpiredRecords of every CA, and only those: a record
// of a certificate still valid at this instant stays.
func TestCleanOncePrunesExpiredRecords(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	c := NewController(fake.NewSimpleClientset(), clocktesting.NewFakePassiveClock(now), time.Minute)
	p := &fakePruner{}
	c.SetRecords(p)
	c.CleanOnce(context.Background())
	if p.calls != 1 || p.caName != "" {
		t.Fatalf("%d prunes of %q, want one of every CA", p.calls, p.caName)
	}
	for _, tc := range []struct {
		notAfter time.Time
		drop     bool
	}{{now.Add(-time.Second), true}, {now, false}, {now.Add(time.Second), false}} {
		if got := p.drop(issuance.Record{NotAfter: tc.notAfter}); got != tc.drop {
			t.Errorf("record valid until %v: dropped %v, want %v", tc.notAfter, got, tc.drop)
		}
	}
}
