package certificateauthority

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/signing/cabinding"
	"rekey.io/rekey/pkg/signing/signingtest"
)

// fakeRecords holds one CA's records; it counts scans and can fail prunes.
type fakeRecords struct {
	mu       sync.Mutex
	list     []issuance.Record
	rev      int64
	scans    int
	pruneErr error
	// onScan runs at each scan (a test's clock moving during it).
	onScan func()
}

func (f *fakeRecords) Scan(_ context.Context, _ string, fn func(issuance.Record) error) error {
	f.mu.Lock()
	f.scans++
	list := append([]issuance.Record(nil), f.list...)
	onScan := f.onScan
	f.mu.Unlock()
	if onScan != nil {
		onScan()
	}
	for _, r := range list {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeRecords) Revision(context.Context, string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rev, nil
}

func (f *fakeRecords) Prune(_ context.Context, _ string, drop func(issuance.Record) bool) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pruneErr != nil {
		return 0, f.pruneErr
	}
	kept := f.list[:0]
	for _, r := range f.list {
		if !drop(r) {
			kept = append(kept, r)
		}
	}
	n := len(f.list) - len(kept)
	f.list = kept
	return n, nil
}

func (f *fakeRecords) add(r issuance.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = append(f.list, r)
	f.rev++
}

// prepare starts a rotation of bound (Preparing, as the rotate subresource
// records it) without a trust propagation wait, and handles it until it is
// Prepared: first the next key is made and published in status (the old
// CA still current), then, status published, it is promoted. It returns
// the Prepared and the Preparing objects.
func prepare(t *testing.T, c *Controller, client *fake.Clientset, bound *rotationv1alpha1.CertificateAuthority) (prepared, preparing *rotationv1alpha1.CertificateAuthority) {
	t.Helper()
	ctx := context.Background()
	start := bound.DeepCopy()
	start.Status.Phase = rotationv1alpha1.PhasePreparing
	start.Spec.Rotation = &rotationv1alpha1.RotationPolicy{TrustPropagation: &metav1.Duration{}}
	client.ClearActions()
	if _, err := c.Handle(ctx, start); err != nil {
		t.Fatal(err)
	}
	preparing = statusUpdate(t, client)
	if preparing.Status.Phase != rotationv1alpha1.PhasePreparing || preparing.Status.Next == nil ||
		preparing.Status.Current.Fingerprint != bound.Status.Current.Fingerprint ||
		strings.Count(preparing.Status.TrustBundle, "BEGIN CERTIFICATE") != 2 {
		t.Fatalf("first Preparing pass: %+v; want still Preparing, the old CA current, the next published beside it", preparing.Status)
	}
	client.ClearActions()
	if _, err := c.Handle(ctx, preparing); err != nil {
		t.Fatal(err)
	}
	return statusUpdate(t, client), preparing
}

// TestHandleWalksARotation: Preparing makes the next key and publishes
// both CAs; Prepared counts who has not renewed; Completing destroys the
// old key and publishes the new CA alone.
func TestHandleWalksARotation(t *testing.T) {
	keys := signingtest.NewMemoryKeys()
	ca := newCA("team-ca", "0123456789")
	c, client, bindings := newTestController(t, ca, keys)
	ctx := context.Background()
	if _, err := c.Handle(ctx, ca); err != nil {
		t.Fatal(err)
	}
	bound := statusUpdate(t, client)
	oldKey := bound.Status.Current.KeyID

	// Start (what the rotate subresource records), with no wait for
	// propagation: Preparing publishes the next key, then promotes it.
	prepared, preparing := prepare(t, c, client, bound)
	b, err := bindings.Get(ctx, "team-ca")
	if err != nil {
		t.Fatal(err)
	}
	if prepared.Status.Phase != rotationv1alpha1.PhasePrepared || prepared.Status.LastInitiationFinishedTime == nil ||
		prepared.Status.Current.KeyID != KeyIDFor(ca, 2) || prepared.Status.Previous == nil || prepared.Status.Previous.KeyID != oldKey ||
		prepared.Status.Next != nil || b.Gen() != 2 || b.Previous == nil || b.Previous.KeyID != oldKey || b.Next != nil {
		t.Fatalf("after Preparing: status %+v, binding %+v", prepared.Status, b)
	}
	if strings.Count(prepared.Status.TrustBundle, "BEGIN CERTIFICATE") != 2 {
		t.Fatal("the bundle does not hold both CAs")
	}
	// Handling Preparing again (a retry after a crash before the status
	// write) makes no third key.
	client.ClearActions()
	if _, err := c.Handle(ctx, preparing); err != nil {
		t.Fatal(err)
	}
	if len(keys.Keys) != 2 {
		t.Fatalf("%d keys after a repeated Preparing, want 2", len(keys.Keys))
	}

	// Prepared: one old certificate of b's is still valid and not renewed;
	// a's was renewed by the new key.
	future := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	records := &fakeRecords{rev: 1, list: []issuance.Record{
		{Serial: "1", CSRName: "old-a", Requester: "alice", Subject: "CN=a", CAKeyID: oldKey, NotAfter: future},
		{Serial: "2", CSRName: "old-b", Requester: "bob", Subject: "CN=b", CAKeyID: oldKey, NotAfter: future},
		{Serial: "3", CSRName: "expired", Requester: "carol", Subject: "CN=c", CAKeyID: oldKey, NotAfter: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Serial: "4", CSRName: "new-a", Requester: "alice", Subject: "CN=a", CAKeyID: KeyIDFor(ca, 2), NotAfter: future},
	}}
	c.records = records
	client.ClearActions()
	recheck, err := c.Handle(ctx, prepared)
	if err != nil {
		t.Fatal(err)
	}
	counted := statusUpdate(t, client)
	if recheck == 0 || counted.Status.PendingRenewal != 1 || len(counted.Status.PendingRenewals) != 1 || counted.Status.PendingRenewals[0].CSRName != "old-b" {
		t.Fatalf("pending %d %+v (recheck %v), want bob's old-b only", counted.Status.PendingRenewal, counted.Status.PendingRenewals, recheck)
	}

	// Complete. A failed prune of the destroyed key's records leaves the
	// step to be retried (the key is already gone; destroying it again is
	// a no-op), and nothing says Completed until the records are pruned.
	completing := counted.DeepCopy()
	completing.Status.Phase = rotationv1alpha1.PhaseCompleting
	records.pruneErr = errors.New("etcd unavailable")
	client.ClearActions()
	if _, err := c.Handle(ctx, completing); err != nil {
		t.Fatal(err)
	}
	if failed := statusUpdate(t, client); failed.Status.Phase == rotationv1alpha1.PhaseCompleted {
		t.Fatal("Completed although the old key's records were not pruned")
	}
	if b, err := bindings.Get(ctx, "team-ca"); err != nil || b.Previous == nil {
		t.Fatalf("binding %+v (err %v): the old key must stay listed until its records are pruned", b, err)
	}
	records.pruneErr = nil
	client.ClearActions()
	if _, err := c.Handle(ctx, completing); err != nil {
		t.Fatal(err)
	}
	completed := statusUpdate(t, client)
	if completed.Status.Phase != rotationv1alpha1.PhaseCompleted || completed.Status.Previous != nil || completed.Status.PendingRenewal != 0 ||
		strings.Count(completed.Status.TrustBundle, "BEGIN CERTIFICATE") != 1 || completed.Status.LastCompletionTime == nil {
		t.Fatalf("after Completing: %+v", completed.Status)
	}
	if _, ok := keys.Keys[oldKey]; ok || len(keys.Keys) != 1 {
		t.Fatalf("keys %v: the old key %s must be destroyed", keys.Keys, oldKey)
	}
	if b, err := bindings.Get(ctx, "team-ca"); err != nil || b.Previous != nil {
		t.Fatal("the binding still lists the old key")
	}
	// The destroyed key's records are gone; the new key's stay.
	if len(records.list) != 1 || records.list[0].CAKeyID != KeyIDFor(ca, 2) {
		t.Fatalf("records after Complete: %+v, want only the new key's", records.list)
	}
}

// TestPreparedCountsAgainOnlyWhenSomethingChanged: a Prepared CA is looked
// at every few seconds; its records are read again only when they changed
// (a new record moves their revision) or when a pending certificate
// expired, not on every look.
func TestPreparedCountsAgainOnlyWhenSomethingChanged(t *testing.T) {
	ca := newCA("team-ca", "0123456789")
	c, client, _ := newTestController(t, ca, signingtest.NewMemoryKeys())
	ctx := context.Background()
	if _, err := c.Handle(ctx, ca); err != nil {
		t.Fatal(err)
	}
	prepared, _ := prepare(t, c, client, statusUpdate(t, client))
	oldKey, newKey := prepared.Status.Previous.KeyID, prepared.Status.Current.KeyID
	clk := c.clock.(*clocktesting.FakePassiveClock)
	start := clk.Now()
	records := &fakeRecords{}
	c.records = records
	// Many certificates of one node: counted one by one, listed at most
	// maxPendingListed, earliest first.
	for i := 0; i < 40; i++ {
		records.add(issuance.Record{Serial: fmt.Sprint(i), CSRName: fmt.Sprint("n1-", i), Requester: "system:node:n1", Subject: "CN=system:node:n1",
			CAKeyID: oldKey, NotAfter: start.Add(time.Duration(40-i) * time.Hour)})
	}
	handle := func() *rotationv1alpha1.CertificateAuthority {
		t.Helper()
		client.ClearActions()
		if _, err := c.Handle(ctx, prepared); err != nil {
			t.Fatal(err)
		}
		if actions := client.Actions(); len(actions) == 1 {
			prepared = statusUpdate(t, client)
		}
		return prepared
	}
	got := handle()
	if got.Status.PendingRenewal != 40 || len(got.Status.PendingRenewals) != maxPendingListed || got.Status.PendingRenewals[0].CSRName != "n1-39" {
		t.Fatalf("pending %d, listed %d (first %+v), want 40 and %d listed, n1-39 first", got.Status.PendingRenewal, len(got.Status.PendingRenewals), got.Status.PendingRenewals, maxPendingListed)
	}
	if records.scans != 1 {
		t.Fatalf("%d scans, want 1", records.scans)
	}
	handle()
	if records.scans != 1 {
		t.Fatalf("read the records again (%d scans) although nothing changed", records.scans)
	}
	// The earliest pending certificate expires: counted again.
	clk.SetTime(start.Add(90 * time.Minute))
	if got := handle(); got.Status.PendingRenewal != 39 || records.scans != 2 {
		t.Fatalf("pending %d after one expired (%d scans), want 39 and a second scan", got.Status.PendingRenewal, records.scans)
	}
	// The node renews with the new key: every one of its old certificates
	// is renewed.
	records.add(issuance.Record{Serial: "new", Requester: "system:node:n1", Subject: "CN=system:node:n1", CAKeyID: newKey, NotAfter: start.Add(48 * time.Hour)})
	if got := handle(); got.Status.PendingRenewal != 0 || len(got.Status.PendingRenewals) != 0 || records.scans != 3 {
		t.Fatalf("pending %d %+v after the renewal (%d scans), want 0 after a third scan", got.Status.PendingRenewal, got.Status.PendingRenewals, records.scans)
	}
}

// TestPendingListSkipsRenewedIdentities: when the certificates that
// expire first belong to an identity that renewed, the list still names
// the ones not renewed (read on a second pass).
func TestPendingListSkipsRenewedIdentities(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	records := &fakeRecords{}
	c := &Controller{records: records, clock: clk}
	start := clk.Now()
	for i := 0; i < 2*maxPendingListed; i++ {
		records.add(issuance.Record{Serial: fmt.Sprint("a", i), Requester: "alice", Subject: "CN=a", CAKeyID: "k1", NotAfter: start.Add(time.Duration(i+1) * time.Minute)})
	}
	records.add(issuance.Record{Serial: "a-new", Requester: "alice", Subject: "CN=a", CAKeyID: "k2", NotAfter: start.Add(48 * time.Hour)})
	records.add(issuance.Record{Serial: "b", CSRName: "bob-old", Requester: "bob", Subject: "CN=b", CAKeyID: "k1", NotAfter: start.Add(24 * time.Hour)})
	ca := newCA("team-ca", "0123456789")
	status := &rotationv1alpha1.CertificateAuthorityStatus{}
	b := &cabinding.Binding{KeyID: "k2", Previous: &cabinding.Key{KeyID: "k1"}}
	if err := c.countPending(context.Background(), ca, b, status); err != nil {
		t.Fatal(err)
	}
	if status.PendingRenewal != 1 || len(status.PendingRenewals) != 1 || status.PendingRenewals[0].CSRName != "bob-old" {
		t.Fatalf("pending %d %+v, want bob's only", status.PendingRenewal, status.PendingRenewals)
	}
}

// TestASlowCountIsNotRepeatedAtOnce: a count that took a while is not made
// again, even after records changed, before recountFactor times as long.
func TestASlowCountIsNotRepeatedAtOnce(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	start := clk.Now()
	records := &fakeRecords{}
	records.onScan = func() { clk.SetTime(clk.Now().Add(time.Second)) }
	c := &Controller{records: records, clock: clk}
	ca := newCA("team-ca", "0123456789")
	b := &cabinding.Binding{KeyID: "k2", Previous: &cabinding.Key{KeyID: "k1"}}
	count := func() int32 {
		t.Helper()
		status := &rotationv1alpha1.CertificateAuthorityStatus{}
		if err := c.countPending(context.Background(), ca, b, status); err != nil {
			t.Fatal(err)
		}
		return status.PendingRenewal
	}
	records.add(issuance.Record{Serial: "1", Requester: "a", Subject: "CN=a", CAKeyID: "k1", NotAfter: start.Add(48 * time.Hour)})
	if n := count(); n != 1 || records.scans != 1 {
		t.Fatalf("pending %d after %d scans", n, records.scans)
	}
	records.add(issuance.Record{Serial: "2", Requester: "b", Subject: "CN=b", CAKeyID: "k1", NotAfter: start.Add(48 * time.Hour)})
	clk.SetTime(start.Add(3 * time.Second))
	if n := count(); n != 1 || records.scans != 1 {
		t.Fatalf("counted again 2s after a count that took 1s: pending %d, %d scans", n, records.scans)
	}
	clk.SetTime(start.Add(recountFactor * time.Second))
	if n := count(); n != 2 || records.scans != 2 {
		t.Fatalf("pending %d, %d scans once the wait was over, want 2 after a second scan", n, records.scans)
	}
}
