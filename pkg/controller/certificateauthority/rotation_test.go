package certificateauthority

import (
	"context"
	"strings"
	"testing"
	"time"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/signing/signingtest"
)

type fakeRecords []issuance.Record

func (f fakeRecords) List(context.Context, string) ([]issuance.Record, error) { return f, nil }

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

	// Start (what the rotate subresource records).
	preparing := bound.DeepCopy()
	preparing.Status.Phase = rotationv1alpha1.PhasePreparing
	client.ClearActions()
	if _, err := c.Handle(ctx, preparing); err != nil {
		t.Fatal(err)
	}
	prepared := statusUpdate(t, client)
	b, err := bindings.Get(ctx, "team-ca")
	if err != nil {
		t.Fatal(err)
	}
	if prepared.Status.Phase != rotationv1alpha1.PhasePrepared || prepared.Status.LastInitiationFinishedTime == nil ||
		prepared.Status.Current.KeyID != KeyIDFor(ca, 2) || prepared.Status.Previous == nil || prepared.Status.Previous.KeyID != oldKey ||
		b.Gen() != 2 || b.Previous == nil || b.Previous.KeyID != oldKey {
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
	c.records = fakeRecords{
		{Serial: "1", CSRName: "old-a", Requester: "alice", Subject: "CN=a", CAKeyID: oldKey, NotAfter: future},
		{Serial: "2", CSRName: "old-b", Requester: "bob", Subject: "CN=b", CAKeyID: oldKey, NotAfter: future},
		{Serial: "3", CSRName: "expired", Requester: "carol", Subject: "CN=c", CAKeyID: oldKey, NotAfter: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Serial: "4", CSRName: "new-a", Requester: "alice", Subject: "CN=a", CAKeyID: KeyIDFor(ca, 2), NotAfter: future},
	}
	client.ClearActions()
	recheck, err := c.Handle(ctx, prepared)
	if err != nil {
		t.Fatal(err)
	}
	counted := statusUpdate(t, client)
	if recheck == 0 || counted.Status.PendingRenewal != 1 || len(counted.Status.PendingRenewals) != 1 || counted.Status.PendingRenewals[0].CSRName != "old-b" {
		t.Fatalf("pending %d %+v (recheck %v), want bob's old-b only", counted.Status.PendingRenewal, counted.Status.PendingRenewals, recheck)
	}

	// Complete.
	completing := counted.DeepCopy()
	completing.Status.Phase = rotationv1alpha1.PhaseCompleting
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
}
