package leaderelection

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"rekey.io/rekey/test/etcdtest"
)

// TestOneLeaderAtATimeAndHandOver: of two campaigners one runs; when it
// stops, the other takes over.
func TestOneLeaderAtATimeAndHandOver(t *testing.T) {
	client := etcdtest.Start(t)
	var running, maxRunning atomic.Int32
	leaders := make(chan string, 4)
	start := func(ctx context.Context, id string) {
		go Run(ctx, Config{Client: client, Key: "/test/leader", Identity: id, LeaseDuration: time.Second,
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
	go Run(ctx, Config{Client: client, Key: "/test/leader", Identity: "flaky", LeaseDuration: 30 * time.Second,
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
