package leaderelection_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/leaderelection"
	"rekey.io/rekey/test/etcdtest"
)

// TestOneLeaderAtATimeAndHandOver: of two campaigners one runs; when it
// stops, the other takes over.
func TestOneLeaderAtATimeAndHandOver(t *testing.T) {
	client := etcdtest.Start(t)
	var running, maxRunning atomic.Int32
	leaders := make(chan string, 4)
	start := func(ctx context.Context, id string) {
		go leaderelection.Run(ctx, leaderelection.Config{Client: client, Key: "/test/leader", Identity: id, LeaseDuration: time.Second,
			Run: func(ctx context.Context) error {
				n := running.Add(1)
				for {
					m := maxRunning.Load()
					if n <= m || maxRunning.CompareAndSwap(m, n) {
						break
					}
				}
				leaders <- id
				<-ctx.Done()
				running.Add(-1)
				return nil
			}})
	}
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	start(ctxA, "a")
	first := <-leaders
	if first != "a" {
		t.Fatalf("first leader %s, want the only campaigner a", first)
	}
	start(ctxB, "b")
	stopA()
	select {
	case second := <-leaders:
		if second != "b" {
			t.Fatalf("second leader %s, want b", second)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("b did not take over within 30s of a stopping")
	}
	if maxRunning.Load() != 1 {
		t.Fatalf("%d leaders ran at once", maxRunning.Load())
	}
}

// TestFailedWorkGivesUpLeadership: work that fails while leader resigns, so
// another replica gets its turn, and this one campaigns again.
func TestFailedWorkGivesUpLeadership(t *testing.T) {
	client := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var attempts atomic.Int32
	go leaderelection.Run(ctx, leaderelection.Config{Client: client, Key: "/test/leader", Identity: "flaky", LeaseDuration: 30 * time.Second,
		Run: func(context.Context) error {
			attempts.Add(1)
			return errors.New("cannot start")
		}})
	// With a 30s lease, a second attempt within a few seconds is only
	// possible if the failed leader resigned instead of holding the lease.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return attempts.Load() >= 2, nil
	})
	if err != nil {
		t.Fatalf("%d attempts: the failed leader did not resign and campaign again", attempts.Load())
	}
}

// TestWorkThatReturnsNilIsNotLoggedAsAnError: work that returns nil while
// leader gave up leadership cleanly; it is logged at info, not as an error
// with a nil error.
func TestWorkThatReturnsNilIsNotLoggedAsAnError(t *testing.T) {
	client := etcdtest.Start(t)
	sink := &recordingSink{}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.New(sink)))
	defer cancel()
	var terms atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		leaderelection.Run(ctx, leaderelection.Config{Client: client, Key: "/test/leader", Identity: "a", LeaseDuration: 30 * time.Second,
			Run: func(ctx context.Context) error {
				if terms.Add(1) == 1 {
					return nil
				}
				// The second term: the first one was logged.
				cancel()
				<-ctx.Done()
				return nil
			}})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of its context being cancelled")
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	const msg = "Work stopped while leader; giving up leadership"
	if !slices.Contains(sink.infos, msg) {
		t.Errorf("info lines %q, want %q", sink.infos, msg)
	}
	if len(sink.errors) != 0 {
		t.Errorf("error lines %q, want none", sink.errors)
	}
}

// recordingSink records the messages logged at info and as errors.
type recordingSink struct {
	mu            sync.Mutex
	infos, errors []string
}

func (s *recordingSink) Init(logr.RuntimeInfo)  {}
func (s *recordingSink) Enabled(level int) bool { return level == 0 }
func (s *recordingSink) Info(_ int, msg string, _ ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.infos = append(s.infos, msg)
}
func (s *recordingSink) Error(_ error, msg string, _ ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errors = append(s.errors, msg)
}
func (s *recordingSink) WithValues(...any) logr.LogSink { return s }
func (s *recordingSink) WithName(string) logr.LogSink   { return s }
