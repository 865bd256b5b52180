package cleaner

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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
	c := NewController(client, &fakePruner{}, clocktesting.NewFakePassiveClock(now), time.Minute)
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
	p := &fakePruner{}
	c := NewController(fake.NewSimpleClientset(), p, clocktesting.NewFakePassiveClock(now), time.Minute)
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

// TestCleanOncePages: the requests are read a page at a time, each page
// asked for with the previous one's continue token, and every page's due
// requests are deleted.
func TestCleanOncePages(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	due := func(name string) certv1alpha1.CertificateSigningRequest {
		return certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(now.Add(-25 * time.Hour))}}
	}
	client := fake.NewSimpleClientset()
	var limits []int64
	var continues []string
	client.PrependReactor("list", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts := a.(k8stesting.ListActionImpl).ListOptions
		limits, continues = append(limits, opts.Limit), append(continues, opts.Continue)
		if opts.Continue == "" {
			return true, &certv1alpha1.CertificateSigningRequestList{ListMeta: metav1.ListMeta{Continue: "page-2"}, Items: []certv1alpha1.CertificateSigningRequest{due("a")}}, nil
		}
		return true, &certv1alpha1.CertificateSigningRequestList{Items: []certv1alpha1.CertificateSigningRequest{due("b")}}, nil
	})
	NewController(client, &fakePruner{}, clocktesting.NewFakePassiveClock(now), time.Minute).CleanOnce(context.Background())
	var deleted []string
	for _, a := range client.Actions() {
		if a.GetVerb() == "delete" {
			deleted = append(deleted, a.(k8stesting.DeleteAction).GetName())
		}
	}
	if strings.Join(continues, ",") != ",page-2" || limits[0] != pageSize || strings.Join(deleted, ",") != "a,b" {
		t.Fatalf("listed with limits %v and continue tokens %q, deleted %v; want two pages of %d and a, b deleted", limits, continues, deleted, pageSize)
	}
}
