package issuer

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/component-base/metrics/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"rekey.io/rekey/pkg/apis/certificates"
)

// TestRequesterLimiter: each identity has its own bucket of burst tokens,
// refilled one per interval; a refused take says how long until the next
// token, and takes nothing.
func TestRequesterLimiter(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(now)
	l := NewRequesterLimiter(3, 10*time.Second, clk)
	for i := 0; i < 3; i++ {
		if wait, ok := l.Take("system:node:n1"); !ok {
			t.Fatalf("take %d refused (wait %v) within the burst", i, wait)
		}
	}
	wait, ok := l.Take("system:node:n1")
	if ok || wait != 10*time.Second {
		t.Fatalf("take past the burst: ok %v, wait %v, want refused with 10s", ok, wait)
	}
	// Another identity is not affected.
	if _, ok := l.Take("system:node:n2"); !ok {
		t.Fatal("n2 refused because n1 used its burst")
	}
	// Refusals take nothing: after 4s, 6s more is still the wait.
	clk.SetTime(now.Add(4 * time.Second))
	if wait, ok := l.Take("system:node:n1"); ok || wait != 6*time.Second {
		t.Fatalf("after 4s: ok %v, wait %v, want refused with 6s", ok, wait)
	}
	clk.SetTime(now.Add(10 * time.Second))
	if _, ok := l.Take("system:node:n1"); !ok {
		t.Fatal("refused after a token was refilled")
	}
	if _, ok := l.Take("system:node:n1"); ok {
		t.Fatal("one interval refilled more than one token")
	}
	// Buckets never hold more than the burst, however long the pause.
	clk.SetTime(now.Add(time.Hour))
	for i := 0; i < 3; i++ {
		if _, ok := l.Take("system:node:n1"); !ok {
			t.Fatalf("take %d after an hour refused", i)
		}
	}
	if _, ok := l.Take("system:node:n1"); ok {
		t.Fatal("an hour's pause filled the bucket past its burst")
	}
}

// TestRequesterLimiterForgetsFullBuckets: the limiter holds only
// identities that used tokens recently; a full bucket is the same as none.
func TestRequesterLimiterForgetsFullBuckets(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(now)
	l := NewRequesterLimiter(2, time.Second, clk)
	for i := 0; i < 1000; i++ {
		l.Take(fmt.Sprint("user-", i))
	}
	clk.SetTime(now.Add(time.Minute))
	l.Take("late")
	if n := l.size(); n > 1 {
		t.Fatalf("%d buckets held a minute later, want only the late one", n)
	}
}

// TestRequesterLimiterDisabled: burst 0 limits nothing.
func TestRequesterLimiterDisabled(t *testing.T) {
	l := NewRequesterLimiter(0, time.Second, clocktesting.NewFakePassiveClock(now))
	for i := 0; i < 100; i++ {
		if _, ok := l.Take("n1"); !ok {
			t.Fatal("a disabled limiter refused")
		}
	}
}

// TestAtCreateIsRateLimitedPerRequester: past its burst, a requester's
// create that would be decided at create is refused with 429 and a
// Retry-After, before any review, attestation or signing; another
// requester, and a manual signer's requests, are not affected.
func TestAtCreateIsRateLimitedPerRequester(t *testing.T) {
	nodeUsages := []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageKeyEncipherment, certificates.UsageClientAuth}
	f := newFixture(t, true)
	clk := clocktesting.NewFakePassiveClock(now)
	f.sync.Limiter = NewRequesterLimiter(2, 10*time.Second, clk)
	self := WithNodeClientGrant(context.Background(), SubresourceSelfNodeClient)
	for i := 0; i < 2; i++ {
		if out, err := f.sync.AtCreate(self, request(t, "example.com/nodes", "system:node:n1", []string{"system:nodes"}, nodeUsages...)); err != nil || len(out.Certificate) == 0 {
			t.Fatalf("create %d: outcome %+v, err %v", i, out, err)
		}
	}
	reviews := f.authz.calls
	RegisterMetrics()
	limited := createRateLimited.WithLabelValues("example.com/nodes")
	before, err := testutil.GetCounterMetricValue(limited)
	if err != nil {
		t.Fatal(err)
	}
	for name, ctx := range map[string]context.Context{"granted": self, "reviewed": context.Background()} {
		_, err := f.sync.AtCreate(ctx, request(t, "example.com/nodes", "system:node:n1", []string{"system:nodes"}, nodeUsages...))
		if !apierrors.IsTooManyRequests(err) {
			t.Fatalf("%s create past the burst: err %v, want 429", name, err)
		}
		if secs, ok := apierrors.SuggestsClientDelay(err); !ok || secs != 10 {
			t.Fatalf("%s: Retry-After %d (%v), want 10", name, secs, ok)
		}
	}
	if after, _ := testutil.GetCounterMetricValue(limited); after-before != 2 {
		t.Fatalf("rate-limited counter moved by %v, want 2", after-before)
	}
	if len(f.records.list) != 2 || f.authz.calls != reviews {
		t.Fatalf("%d records, %d reviews after the refusals: a refused create must sign and review nothing", len(f.records.list), f.authz.calls-reviews)
	}
	// The Retry-After is an estimate: the limited create succeeds after it.
	if out, err := f.sync.AtCreate(self, request(t, "example.com/nodes", "system:node:n2", []string{"system:nodes"}, nodeUsages...)); err != nil || len(out.Certificate) == 0 {
		t.Fatalf("n2 limited by n1's creates: outcome %+v, err %v", out, err)
	}
	// The identity is spec.username, never the subject: n1 asking for a
	// certificate named n3 is still n1.
	other := request(t, "example.com/nodes", "system:node:n3", []string{"system:nodes"}, nodeUsages...)
	other.Spec.Username = "system:node:n1"
	if _, err := f.sync.AtCreate(WithNodeClientGrant(context.Background(), SubresourceNodeClient), other); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("n1's create for n3's name: err %v, want 429 (n1's bucket)", err)
	}
	// A Manual signer decides nothing at create: no token taken.
	if _, err := f.sync.AtCreate(context.Background(), request(t, "example.com/manual", "system:node:n1", nil, nodeUsages...)); err != nil {
		t.Fatalf("manual signer: %v", err)
	}
	clk.SetTime(now.Add(10 * time.Second))
	if out, err := f.sync.AtCreate(self, request(t, "example.com/nodes", "system:node:n1", []string{"system:nodes"}, nodeUsages...)); err != nil || len(out.Certificate) == 0 {
		t.Fatalf("after Retry-After: outcome %+v, err %v", out, err)
	}
}
