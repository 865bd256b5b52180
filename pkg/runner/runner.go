// Package runner runs the worker loop every rekey controller shares: wait
// for the informers, then process keys from a rate-limited queue.
package runner

import (
	"context"
	"sync"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// SyncFunc handles one key. A non-zero requeueAfter looks at the key again
// later; an error retries it with back-off.
type SyncFunc[K comparable] func(ctx context.Context, key K) (requeueAfter time.Duration, err error)

// NewQueue returns a queue with the default controller back-off.
func NewQueue[K comparable](name string) workqueue.TypedRateLimitingInterface[K] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[K](),
		workqueue.TypedRateLimitingQueueConfig[K]{Name: name})
}

// Run waits for the informers to sync, runs workers until ctx is done,
// shuts the queue down, and returns only once every worker has returned:
// a controller whose Run has returned syncs nothing more, so that the next
// leadership term on this replica never overlaps the last one.
func Run[K comparable](ctx context.Context, name string, queue workqueue.TypedRateLimitingInterface[K], synced []cache.InformerSynced, workers int, handle SyncFunc[K]) {
	defer utilruntime.HandleCrash()
	defer queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	// The sync functions log through the context, with the controller's name.
	logger := klog.FromContext(ctx).WithValues("controller", name)
	ctx = klog.NewContext(ctx, logger)
	var running sync.WaitGroup
	for i := 0; i < workers; i++ {
		running.Add(1)
		go func() {
			defer running.Done()
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for processNext(ctx, queue, handle) {
				}
			}, time.Second)
		}()
	}
	<-ctx.Done()
	// Wakes the workers waiting for a key; those in a sync finish it
	// (its context is done) and stop.
	queue.ShutDown()
	running.Wait()
}

func processNext[K comparable](ctx context.Context, queue workqueue.TypedRateLimitingInterface[K], sync SyncFunc[K]) bool {
	key, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(key)
	requeueAfter, err := sync(ctx, key)
	switch {
	case err != nil:
		klog.FromContext(ctx).Error(err, "Sync failed; retrying", "key", key)
		queue.AddRateLimited(key)
	case requeueAfter > 0:
		queue.Forget(key)
		queue.AddAfter(key, requeueAfter)
	default:
		queue.Forget(key)
	}
	return true
}
