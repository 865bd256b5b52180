package certificateauthority

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/signing/signingtest"
	"rekey.io/rekey/pkg/trustpublish"
)

// gateFixture is a CA just bound, a controller with an index of trust
// consumers and a publication tracker.
type gateFixture struct {
	c         *Controller
	client    *fake.Clientset
	consumers cache.Indexer
	tracker   *trustpublish.Tracker
	clock     *clocktesting.FakePassiveClock
	bound     *rotationv1alpha1.CertificateAuthority
}

func newGateFixture(t *testing.T) *gateFixture {
	t.Helper()
	ca := newCA("team-ca", "0123456789")
	c, client, _ := newTestController(t, ca, signingtest.NewMemoryKeys())
	if _, err := c.Handle(context.Background(), ca); err != nil {
		t.Fatal(err)
	}
	f := &gateFixture{c: c, client: client, bound: statusUpdate(t, client), clock: c.clock.(*clocktesting.FakePassiveClock)}
	f.consumers = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{ConsumersByCA: consumersByCA})
	c.consumers = f.consumers
	f.tracker = trustpublish.New()
	c.published = f.tracker
	return f
}

// handle runs one sync of obj and returns the status written (obj itself
// when nothing was written).
func (f *gateFixture) handle(t *testing.T, obj *rotationv1alpha1.CertificateAuthority) (*rotationv1alpha1.CertificateAuthority, time.Duration) {
	t.Helper()
	f.client.ClearActions()
	recheck, err := f.c.Handle(context.Background(), obj)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.client.Actions()) == 0 {
		return obj, recheck
	}
	return statusUpdate(t, f.client), recheck
}

func (f *gateFixture) consumer(t *testing.T, name string, holds ...string) {
	t.Helper()
	tc := &rotationv1alpha1.TrustConsumer{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: rotationv1alpha1.TrustConsumerSpec{CertificateAuthorities: []string{"team-ca"}}}
	if len(holds) > 0 {
		tc.Status.Holds = []rotationv1alpha1.TrustHeld{{CertificateAuthority: "team-ca", Fingerprints: holds}}
	}
	if err := f.consumers.Update(tc); err != nil {
		t.Fatal(err)
	}
}

func trustCondition(t *testing.T, ca *rotationv1alpha1.CertificateAuthority) *metav1.Condition {
	t.Helper()
	cond := apimeta.FindStatusCondition(ca.Status.Conditions, rotationv1alpha1.CertificateAuthorityTrustPropagated)
	if cond == nil {
		t.Fatalf("no TrustPropagated condition in %+v", ca.Status.Conditions)
	}
	return cond
}

func start(ca *rotationv1alpha1.CertificateAuthority, propagation time.Duration) *rotationv1alpha1.CertificateAuthority {
	s := ca.DeepCopy()
	s.Status.Phase = rotationv1alpha1.PhasePreparing
	s.Spec.Rotation = &rotationv1alpha1.RotationPolicy{TrustPropagation: &metav1.Duration{Duration: propagation}}
	return s
}

// TestPreparingWaitsForEveryConsumerThenPropagation walks the gate: the
// old CA stays current (and signs) while the new one is published, until
// every consumer holds the new CA and trustPropagation has passed.
func TestPreparingWaitsForEveryConsumerThenPropagation(t *testing.T) {
	f := newGateFixture(t)
	f.consumer(t, "kube-apiserver")
	f.consumer(t, "node-b")
	old := f.bound.Status.Current.Fingerprint

	preparing, _ := f.handle(t, start(f.bound, time.Minute))
	if preparing.Status.Phase != rotationv1alpha1.PhasePreparing || preparing.Status.Next == nil || preparing.Status.Current.Fingerprint != old {
		t.Fatalf("after Start: %+v; want Preparing, the old CA current and the next published", preparing.Status)
	}
	auth, err := f.c.authorities.Get(context.Background(), "team-ca")
	if err != nil || auth.KeyID != f.bound.Status.Current.KeyID {
		t.Fatalf("while Preparing the CA signs with %v (err %v), want the old key %s", auth, err, f.bound.Status.Current.KeyID)
	}
	next := preparing.Status.Next.Fingerprint

	// Status published: now the consumers are waited for, by name.
	waiting, _ := f.handle(t, preparing)
	cond := trustCondition(t, waiting)
	if waiting.Status.Phase != rotationv1alpha1.PhasePreparing || cond.Reason != rotationv1alpha1.ReasonWaitingForConsumers ||
		!strings.Contains(cond.Message, "kube-apiserver, node-b") || waiting.Status.Trust.Waiting != 2 || waiting.Status.Trust.Consumers != 2 ||
		waiting.Status.Trust.PublishedTime == nil {
		t.Fatalf("status %+v, condition %+v; want waiting for kube-apiserver and node-b", waiting.Status.Trust, cond)
	}

	// A report of the old CA only, or of a CA the server never made, does
	// not count.
	f.consumer(t, "kube-apiserver", old)
	f.consumer(t, "node-b", old, "SHA256:"+strings.Repeat("0", 64))
	if got, _ := f.handle(t, waiting); got.Status.Phase != rotationv1alpha1.PhasePreparing || got.Status.Trust.Waiting != 2 {
		t.Fatalf("reports without the new CA moved the gate: %+v", got.Status.Trust)
	}
	f.consumer(t, "kube-apiserver", old, next)
	// A report that changes only the counts is written no sooner than
	// trustWriteInterval after the last write (5,000 consumers report
	// together): held back, with a look again when it ends.
	if held, recheck := f.handle(t, waiting); held != waiting || recheck <= 0 || recheck > trustWriteInterval {
		t.Fatalf("a count-only change was written at once (recheck %v)", recheck)
	}
	f.clock.SetTime(f.clock.Now().Add(trustWriteInterval))
	got, _ := f.handle(t, waiting)
	if got.Status.Trust.Waiting != 1 || got.Status.Trust.WaitingFor[0] != "node-b" {
		t.Fatalf("trust %+v, want node-b alone waited for", got.Status.Trust)
	}
	// The last report changes the reason (now the propagation): written
	// at once.
	f.consumer(t, "node-b", old, next)
	got, recheck := f.handle(t, got)
	if cond := trustCondition(t, got); got.Status.Phase != rotationv1alpha1.PhasePreparing || cond.Reason != rotationv1alpha1.ReasonWaitingForPropagation ||
		recheck <= 0 || recheck > time.Minute {
		t.Fatalf("phase %s, condition %+v, recheck %v; want waiting for the minute of propagation", got.Status.Phase, cond, recheck)
	}
	f.clock.SetTime(got.Status.Trust.PublishedTime.Add(time.Minute))
	prepared, _ := f.handle(t, got)
	if prepared.Status.Phase != rotationv1alpha1.PhasePrepared || prepared.Status.Current.Fingerprint != next || prepared.Status.Previous.Fingerprint != old ||
		trustCondition(t, prepared).Reason != rotationv1alpha1.ReasonTrusted {
		t.Fatalf("after the wait: %+v", prepared.Status)
	}
	auth, err = f.c.authorities.Get(context.Background(), "team-ca")
	if err != nil || auth.KeyID != prepared.Status.Current.KeyID {
		t.Fatalf("Prepared signs with %v (err %v), want the new key", auth, err)
	}
}

// TestPreparingWaitsForRekeysOwnPublishers: a publisher that concerns the
// CA and has not written the bundle with the new CA keeps it Preparing;
// one that does not concern it does not.
func TestPreparingWaitsForRekeysOwnPublishers(t *testing.T) {
	f := newGateFixture(t)
	f.tracker.Register("other", func(*rotationv1alpha1.CertificateAuthority) bool { return false })
	pub := f.tracker.Register("rekey-publisher", func(ca *rotationv1alpha1.CertificateAuthority) bool { return ca.Name == "team-ca" })
	preparing, _ := f.handle(t, start(f.bound, 0))
	got, _ := f.handle(t, preparing)
	if cond := trustCondition(t, got); got.Status.Phase != rotationv1alpha1.PhasePreparing || cond.Reason != rotationv1alpha1.ReasonWaitingForPublication ||
		!strings.Contains(cond.Message, "rekey-publisher") || strings.Contains(cond.Message, "other") {
		t.Fatalf("phase %s, condition %+v; want waiting for rekey-publisher only", got.Status.Phase, cond)
	}
	pub.Published("team-ca", f.bound.Status.TrustBundle) // the old bundle
	if got, _ = f.handle(t, got); got.Status.Phase != rotationv1alpha1.PhasePreparing {
		t.Fatal("the old bundle's publication opened the gate")
	}
	pub.Failed("team-ca", errors.New("configmaps is forbidden"))
	if got, _ = f.handle(t, got); !strings.Contains(trustCondition(t, got).Message, "configmaps is forbidden") {
		t.Fatalf("condition %+v does not say why the publisher lags", trustCondition(t, got))
	}
	pub.Published("team-ca", preparing.Status.TrustBundle)
	if got, _ = f.handle(t, got); got.Status.Phase != rotationv1alpha1.PhasePrepared {
		t.Fatalf("phase %s after the publisher wrote the new bundle, want Prepared", got.Status.Phase)
	}
}

// TestOverrideEndsTheWait: Prepare with force (status.trust.overriddenTime)
// promotes the new key although a consumer still waits.
func TestOverrideEndsTheWait(t *testing.T) {
	f := newGateFixture(t)
	f.consumer(t, "gone-node")
	preparing, _ := f.handle(t, start(f.bound, time.Hour))
	waiting, _ := f.handle(t, preparing)
	if waiting.Status.Phase != rotationv1alpha1.PhasePreparing {
		t.Fatal("not waiting for gone-node")
	}
	overridden := waiting.DeepCopy()
	now := metav1.NewTime(f.clock.Now())
	overridden.Status.Trust.OverriddenTime = &now
	got, _ := f.handle(t, overridden)
	if got.Status.Phase != rotationv1alpha1.PhasePrepared || trustCondition(t, got).Reason != rotationv1alpha1.ReasonOverridden ||
		got.Status.Trust.WaitingFor[0] != "gone-node" {
		t.Fatalf("after the override: phase %s, trust %+v, condition %+v", got.Status.Phase, got.Status.Trust, trustCondition(t, got))
	}
}

// TestRenewalByTheHolderCounts: a node's first certificate, requested with
// its bootstrap identity, is renewed by the node itself; a certificate of
// the same subject requested by someone else does not renew it.
func TestRenewalByTheHolderCounts(t *testing.T) {
	future := time.Now().Add(24 * time.Hour)
	renewed := map[identity]bool{
		{"system:node:n1", "CN=system:node:n1,O=system:nodes"}: true,
		{"mallory", "CN=system:node:n2,O=system:nodes"}:        true,
	}
	byBootstrap := issuance.Record{Requester: "system:bootstrap:abcdef", Subject: "CN=system:node:n1,O=system:nodes", Holder: "system:node:n1", NotAfter: future}
	if !renewedBy(renewed, byBootstrap) {
		t.Error("the node's own renewal does not count for the certificate its bootstrap identity requested")
	}
	other := issuance.Record{Requester: "system:bootstrap:abcdef", Subject: "CN=system:node:n2,O=system:nodes", Holder: "system:node:n2", NotAfter: future}
	if renewedBy(renewed, other) {
		t.Error("a certificate of n2's subject requested by mallory counts as n2's renewal")
	}
	serving := issuance.Record{Requester: "system:bootstrap:abcdef", Subject: "CN=system:node:n1,O=system:nodes", NotAfter: future}
	if renewedBy(renewed, serving) {
		t.Error("a certificate that is not a client certificate counts as renewed by its subject's user")
	}
}

// TestAConsumerBeingDeletedNoLongerBlocks: an operator's delete of a gone
// consumer unblocks at once, whatever finalizer keeps the object.
func TestAConsumerBeingDeletedNoLongerBlocks(t *testing.T) {
	f := newGateFixture(t)
	f.consumer(t, "gone-node")
	preparing, _ := f.handle(t, start(f.bound, 0))
	waiting, _ := f.handle(t, preparing)
	if waiting.Status.Phase != rotationv1alpha1.PhasePreparing {
		t.Fatal("not waiting for gone-node")
	}
	now := metav1.NewTime(f.clock.Now())
	tc := &rotationv1alpha1.TrustConsumer{ObjectMeta: metav1.ObjectMeta{Name: "gone-node", DeletionTimestamp: &now, Finalizers: []string{"example.com/keep"}},
		Spec: rotationv1alpha1.TrustConsumerSpec{CertificateAuthorities: []string{"team-ca"}}}
	if err := f.consumers.Update(tc); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.handle(t, waiting); got.Status.Phase != rotationv1alpha1.PhasePrepared || got.Status.Trust.Consumers != 0 {
		t.Fatalf("phase %s, trust %+v; want Prepared once the consumer is being deleted", got.Status.Phase, got.Status.Trust)
	}
}

// TestOverrideStillWaitsForStatus: a forced Prepare right after Start does
// not let the new key sign before the stored status publishes it.
func TestOverrideStillWaitsForStatus(t *testing.T) {
	f := newGateFixture(t)
	s := start(f.bound, time.Hour)
	now := metav1.NewTime(f.clock.Now())
	s.Status.Trust = &rotationv1alpha1.TrustStatus{OverriddenTime: &now}
	first, _ := f.handle(t, s)
	if first.Status.Phase != rotationv1alpha1.PhasePreparing || first.Status.Next == nil {
		t.Fatalf("overridden before status published the new CA: %+v", first.Status)
	}
	if got, _ := f.handle(t, first); got.Status.Phase != rotationv1alpha1.PhasePrepared || trustCondition(t, got).Reason != rotationv1alpha1.ReasonOverridden {
		t.Fatalf("once published, the override did not promote: %+v", got.Status)
	}
}

// TestPreparedTimeIsRoundedUp: status keeps whole seconds, and agents draw
// their renewal points from lastInitiationFinishedTime: rounded down, up
// to a second's share of the window would renew at once on seeing
// Prepared.
func TestPreparedTimeIsRoundedUp(t *testing.T) {
	f := newGateFixture(t)
	preparing, _ := f.handle(t, start(f.bound, 0))
	promotedAt := f.clock.Now().Add(400 * time.Millisecond)
	f.clock.SetTime(promotedAt)
	prepared, _ := f.handle(t, preparing)
	got := prepared.Status.LastInitiationFinishedTime
	if prepared.Status.Phase != rotationv1alpha1.PhasePrepared || got == nil || !got.Time.Equal(promotedAt.Truncate(time.Second).Add(time.Second)) {
		t.Fatalf("phase %s, lastInitiationFinishedTime %v; want Prepared at %s rounded up", prepared.Status.Phase, got, promotedAt)
	}
}
