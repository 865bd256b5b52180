package leaderelection_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/testutil"

	"rekey.io/rekey/pkg/leaderelection"
	"rekey.io/rekey/test/etcdtest"
)

// TestLeaseDeadlineStopsLeaderWork: a leader whose keepalives stop (its
// keepalive loop blocked, as in a process stopped past its lease) stops
// leading at its local lease deadline, before any keepalive could succeed
// again: Leading is false from the deadline on and the work context is
// cancelled by then (a timer's slack). Once the loop runs again, it does
// not revive the term; a new term starts with a new lease.
func TestLeaseDeadlineStopsLeaderWork(t *testing.T) {
	client := etcdtest.Start(t)
	fence := leaderelection.NewFence()
	var pause atomic.Bool
	paused := make(chan time.Time, 1)
	release := make(chan struct{})
	var sentWhilePaused atomic.Int32
	cfg := leaderelection.WithBeforeKeepAlive(leaderelection.Config{Client: client, Key: "/test/leader", Identity: "a", LeaseDuration: 3 * time.Second, Fence: fence}, func() {
		if !pause.Load() {
			return
		}
		select {
		case paused <- fence.Deadline():
		default:
		}
		<-release
		if pause.Load() {
			sentWhilePaused.Add(1)
		}
	})
	work, terms := leadAlone(t, cfg)
	if !fence.Leading() {
		t.Fatal("Leading() is false in the leader's term")
	}
	if leaderelection.FromContext(work) != fence {
		t.Fatal("the work context does not carry the election's fence")
	}

	pause.Store(true)
	var deadline time.Time
	select {
	case deadline = <-paused:
	case <-time.After(10 * time.Second):
		t.Fatal("the keepalive loop did not reach its next keepalive within 10s")
	}
	if leading, now := fence.Leading(), time.Now(); !leading && now.Before(deadline) {
		t.Fatalf("Leading() false %s before the lease deadline", deadline.Sub(now))
	}
	select {
	case <-work.Done():
		stopped := time.Now()
		if stopped.Before(deadline) {
			t.Errorf("work stopped %s before the lease deadline while the lease was still held", deadline.Sub(stopped))
		}
		// The timer's slack on a loaded machine; the fence itself is exact.
		if late := stopped.Sub(deadline); late > time.Second {
			t.Errorf("work stopped %s after the lease deadline", late)
		}
	case <-time.After(time.Until(deadline) + 5*time.Second):
		t.Fatalf("the work context was not cancelled within 5s of the lease deadline while keepalives were paused")
	}
	if fence.Leading() {
		t.Fatal("Leading() is true past the lease deadline")
	}
	if n := sentWhilePaused.Load(); n != 0 {
		t.Fatalf("%d keepalives were sent while paused", n)
	}

	// Resumed: the old term stays over, and the replica campaigns again
	// with a new lease.
	pause.Store(false)
	close(release)
	select {
	case next := <-terms:
		if next.Err() != nil || !fence.Leading() {
			t.Fatal("the new term does not lead")
		}
		if !fence.Deadline().After(deadline) {
			t.Fatal("the new term kept the old lease deadline")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no new term within 30s of resuming")
	}
}

// leadAlone runs cfg's election, the only campaigner, until the test
// ends, with work that holds each term until it ends. It returns the first
// term's context and the channel of the terms after it.
func leadAlone(t *testing.T, cfg leaderelection.Config) (context.Context, <-chan context.Context) {
	t.Helper()
	terms := make(chan context.Context, 4)
	cfg.Run = func(ctx context.Context) error {
		terms <- ctx
		<-ctx.Done()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); leaderelection.Run(ctx, cfg) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case first := <-terms:
		return first, terms
	case <-time.After(30 * time.Second):
		t.Fatal("the only campaigner did not become leader within 30s")
		return nil, nil
	}
}

// TestFenceRefusesWritesWhenNotLeading: the controllers' transport sends
// reads always and writes only while leading, checked at the moment each
// is sent; each refusal is counted.
func TestFenceRefusesWritesWhenNotLeading(t *testing.T) {
	var writes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			writes.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"ns"}}`))
	}))
	defer srv.Close()
	leaderelection.RegisterMetrics()
	fence := leaderelection.NewFence()
	cfg := &rest.Config{Host: srv.URL}
	cfg.Wrap(fence.WrapTransport)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns"}}
	before, _ := testutil.GetCounterMetricValue(leaderelection.FencedWrites.WithLabelValues(leaderelection.TargetAPI))

	// No term yet: reads go, writes do not.
	if _, err := kube.CoreV1().ConfigMaps("ns").Get(ctx, "x", metav1.GetOptions{}); err != nil {
		t.Fatalf("a read while not leading: %v", err)
	}
	if _, err := kube.CoreV1().ConfigMaps("ns").Create(ctx, cm, metav1.CreateOptions{}); !errors.Is(err, leaderelection.ErrNotLeading) {
		t.Fatalf("a write while not leading: got %v, want ErrNotLeading", err)
	}
	// Leading: writes go.
	fence.BeginUntil(time.Now().Add(200 * time.Millisecond))
	if _, err := kube.CoreV1().ConfigMaps("ns").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("a write while leading: %v", err)
	}
	// Past the lease deadline, with nothing having ended the term: the
	// fence is the clock, not a goroutine that may not have run yet.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return !fence.Leading(), nil
	}); err != nil {
		t.Fatalf("the fence still leads past its lease deadline %s", fence.Deadline())
	}
	if err := kube.CoreV1().ConfigMaps("ns").Delete(ctx, "x", metav1.DeleteOptions{}); !errors.Is(err, leaderelection.ErrNotLeading) {
		t.Fatalf("a write past the lease deadline: got %v, want ErrNotLeading", err)
	}
	if got := writes.Load(); got != 1 {
		t.Fatalf("the server got %d writes, want the 1 made while leading", got)
	}
	after, _ := testutil.GetCounterMetricValue(leaderelection.FencedWrites.WithLabelValues(leaderelection.TargetAPI))
	if after-before != 2 {
		t.Fatalf("rekey_leader_fenced_writes_total{target=api} rose by %v, want 2", after-before)
	}
	// A nil fence (no leader election) leads.
	var none *leaderelection.Fence
	if !none.Leading() || none.WrapTransport(http.DefaultTransport) != http.DefaultTransport {
		t.Fatal("a nil fence must lead and leave the transport alone")
	}
}
