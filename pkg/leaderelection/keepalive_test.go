package leaderelection_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"rekey.io/rekey/pkg/leaderelection"
	"rekey.io/rekey/test/etcdtest"
)

// keepAliveAttempt is one keepalive as the etcd client was asked to send it.
type keepAliveAttempt struct {
	start, end    time.Time
	ctxDeadline   time.Time // zero: none
	requireLeader bool
	held          bool // held as a member without a leader would
	err           error
}

// TestKeepAliveStuckOnALeaderlessMemberIsRetried: the etcd member a
// keepalive lands on may have lost its leader (cut off from its peers); it
// then holds the request for its own request timeout (7 s by default),
// longer than what is left of a short lease. Each keepalive attempt must
// ask for a leader (so that such a member refuses it at once) and be
// bounded by about half the keepalive interval, and a failed attempt
// retried (the client's round robin takes the next one to another
// member), so that a leader whose lease two healthy members still hold
// keeps it. Before, one attempt could wait out the whole lease and the
// replica lost leadership for nothing.
func TestKeepAliveStuckOnALeaderlessMemberIsRetried(t *testing.T) {
	client := etcdtest.Start(t)
	fence := leaderelection.NewFence()
	// The next `hold` attempts are held until their context ends.
	var hold atomic.Int32
	var heldOne atomic.Bool
	var mu sync.Mutex
	var attempts []keepAliveAttempt
	succeededAfterHold := make(chan struct{}, 1)
	send := func(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
		a := keepAliveAttempt{start: time.Now()}
		a.ctxDeadline, _ = ctx.Deadline()
		md, _ := metadata.FromOutgoingContext(ctx)
		a.requireLeader = len(md.Get(rpctypes.MetadataRequireLeaderKey)) > 0 && md.Get(rpctypes.MetadataRequireLeaderKey)[0] == rpctypes.MetadataHasLeader
		var resp *clientv3.LeaseKeepAliveResponse
		if hold.Add(-1) >= 0 {
			a.held = true
			heldOne.Store(true)
			<-ctx.Done()
			a.err = ctx.Err()
		} else {
			resp, a.err = client.KeepAliveOnce(ctx, id)
		}
		a.end = time.Now()
		mu.Lock()
		attempts = append(attempts, a)
		mu.Unlock()
		if !a.held && a.err == nil && heldOne.Load() {
			select {
			case succeededAfterHold <- struct{}{}:
			default:
			}
		}
		return resp, a.err
	}
	const leaseDuration = 6 * time.Second // keepalives every 2 s
	cfg := leaderelection.WithKeepAliveOnce(leaderelection.Config{Client: client, Key: "/test/leader", Identity: "a", LeaseDuration: leaseDuration, Fence: fence}, send)
	work, _ := leadAlone(t, cfg)
	// The next two keepalives land on a leaderless member; the third on a
	// healthy one.
	held := fence.Deadline()
	hold.Store(2)
	select {
	case <-succeededAfterHold:
	case <-work.Done():
		t.Fatalf("leadership lost (%s after the lease deadline %s) while keepalives were held on a leaderless member", time.Since(held).Round(time.Millisecond), held.Round(0))
	case <-time.After(2 * leaseDuration):
		t.Fatal("no keepalive succeeded within two lease durations after two were held")
	}
	if work.Err() != nil || !fence.Leading() {
		t.Fatal("the term ended although a keepalive succeeded before the lease deadline")
	}
	if !fence.Deadline().After(held) {
		t.Fatalf("the lease deadline %s did not move past %s", fence.Deadline().Round(0), held.Round(0))
	}
	mu.Lock()
	got := append([]keepAliveAttempt(nil), attempts...)
	mu.Unlock()
	nHeld := 0
	for i, a := range got {
		if !a.requireLeader {
			t.Errorf("keepalive %d was sent without requiring a leader", i)
		}
		if a.ctxDeadline.IsZero() {
			t.Errorf("keepalive %d had no deadline", i)
			continue
		}
		if !a.held {
			continue
		}
		nHeld++
		// About half the 2 s keepalive interval; the slack is a loaded
		// machine's.
		if d := a.end.Sub(a.start); d > 1500*time.Millisecond {
			t.Errorf("held keepalive %d took %s, want it bounded near 1s (half the keepalive interval)", i, d.Round(time.Millisecond))
		}
	}
	if nHeld != 2 {
		t.Fatalf("%d held keepalives before one succeeded, want 2 (attempts %+v)", nHeld, got)
	}
}
