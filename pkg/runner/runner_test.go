package runner

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// TestRunRetriesErrorsAndRequeues: an error retries the key with back-off,
// a requeue looks at it again later, and the sync function logs through
// its context with the controller's name.
func TestRunRetriesErrorsAndRequeues(t *testing.T) {
	type key struct{ name string }
	queue := NewQueue[key]("test")
	var mu sync.Mutex
	calls := map[string]int{}
	loggerHasName := false
	sync := func(ctx context.Context, k key) (time.Duration, error) {
		mu.Lock()
		defer mu.Unlock()
		calls[k.name]++
		loggerHasName = klog.FromContext(ctx).GetSink() != nil
		switch {
		case k.name == "flaky" && calls[k.name] < 3:
			return 0, errors.New("not yet")
		case k.name == "recheck" && calls[k.name] < 2:
			return 10 * time.Millisecond, nil
		}
		return 0, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		Run(ctx, "test", queue, []cache.InformerSynced{func() bool { return true }}, 2, sync)
		close(done)
	}()
	queue.Add(key{"flaky"})
	queue.Add(key{"recheck"})
	queue.Add(key{"once"})
	count := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[name]
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return count("flaky") == 3 && count("recheck") == 2 && count("once") == 1, nil
	})
	if err != nil {
		t.Fatalf("calls %v", calls)
	}
	if !loggerHasName {
		t.Error("no logger in the sync function's context")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	if !queue.ShuttingDown() {
		t.Fatal("the queue was not shut down")
	}
}

// TestRunReturnsOnlyAfterItsWorkers: a sync still running when the context
// ends finishes before Run returns, so nothing a controller started
// outlives it (a new leadership term never overlaps the last one).
func TestRunReturnsOnlyAfterItsWorkers(t *testing.T) {
	queue := NewQueue[string]("test")
	inSync, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	handle := func(ctx context.Context, _ string) (time.Duration, error) {
		close(inSync)
		<-release
		finished.Store(true)
		return 0, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Run(ctx, "test", queue, nil, 1, handle)
		close(done)
	}()
	queue.Add("key")
	<-inSync
	cancel()
	select {
	case <-done:
		t.Fatal("Run returned while a sync was still running")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return once the sync finished")
	}
	if !finished.Load() {
		t.Fatal("Run returned before the sync finished")
	}
}
