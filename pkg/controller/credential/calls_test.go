package credential

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
)

// TestLaneHandsTheSlotToTheRealWaiter: a key woken another way (its own
// status write, the Secret watch, /rotate) while another was handed the
// freed slot does not take that slot, and leaves the waiting list when it
// does start; a slot handed to a key that does not come for it (its plan
// changed, it was deleted) goes on to the next waiter; a key that starts
// in another lane leaves its old lane's waiting list. Before, the woken
// key took the slot but stayed on the list, and the next freed slot went
// to that stale entry: the real waiter stayed waiting on an idle lane.
func TestLaneHandsTheSlotToTheRealWaiter(t *testing.T) {
	var woken []string
	c := newCalls(func(k string) { woken = append(woken, k) })
	lane := slot{name: "Webhook Mint https://h:443", limit: 1}
	mustStart := func(key string, want bool, lanes ...slot) {
		t.Helper()
		if got := c.start(key, lanes...); got != want {
			t.Fatalf("start(%s) = %v, want %v", key, got, want)
		}
		if err := c.checkLocked(); err != nil {
			t.Fatal(err)
		}
	}
	mustWake := func(want ...string) {
		t.Helper()
		if !slices.Equal(woken, want) {
			t.Fatalf("handed back %v, want %v", woken, want)
		}
		woken = nil
	}
	mustStart("A", true, lane)
	mustStart("B", false, lane)
	mustStart("C", false, lane)
	c.finish("A")
	mustWake("B")
	mustStart("C", false, lane) // woken another way: the slot is B's
	mustStart("B", true, lane)
	c.finish("B")
	mustWake("C")
	mustStart("C", true, lane)
	c.finish("C")
	mustWake()

	// Handed a slot it does not use: the slot goes on at the end of its sync.
	mustStart("A", true, lane)
	mustStart("B", false, lane)
	mustStart("C", false, lane)
	c.finish("A")
	mustWake("B")
	c.settle("B") // B's sync decided to wait instead
	mustWake("C")
	mustStart("C", true, lane)
	c.finish("C")
	mustWake()

	// Waiting in one lane, started in another: off the first one's list.
	other := slot{name: "Webhook Revoke https://h:443", limit: 1}
	mustStart("A", true, lane)
	mustStart("B", false, lane)
	mustStart("B", true, other)
	c.finish("A")
	mustWake()
	c.finish("B")
	mustWake()
	if len(c.lanes) != 0 || len(c.waitingIn) != 0 || len(c.promisedIn) != 0 || len(c.inFlight) != 0 {
		t.Fatalf("idle lanes are kept: lanes %v waiting %v promised %v running %v", c.lanes, c.waitingIn, c.promisedIn, c.inFlight)
	}
}

// TestLanesNeverStrandAWaiter runs the lanes as the controller does: a
// real work queue, workers that try to start a call for each key they get
// (sometimes in another lane than before: the plan changed), keys woken at
// random by other events, and some syncs that decide no call is needed
// this time. When everything is quiet, every key has made all its calls:
// a key left waiting while nothing runs would wait for the 10-minute
// resync.
func TestLanesNeverStrandAWaiter(t *testing.T) {
	const keys, callsPerKey, workers = 40, 5, 4
	lanes := []string{"Webhook Revoke https://a:443", "Webhook Revoke https://b:443", "Random Revoke"}
	queue := workqueue.NewTyped[string]()
	defer queue.ShutDown()
	var left [keys]atomic.Int64
	for i := range left {
		left[i].Store(callsPerKey)
	}
	// active counts what may still add to the queue: running calls, syncs,
	// delayed adds and the noise.
	var active atomic.Int64
	c := newCalls(func(k string) { queue.Add(k) })
	var violations atomic.Int64
	check := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if err := c.checkLocked(); err != nil {
			violations.Add(1)
			t.Error(err)
		}
	}
	sync1 := func(key string) {
		var i int
		fmt.Sscanf(key, "k%d", &i)
		if left[i].Load() == 0 {
			return
		}
		if rand.IntN(8) == 0 {
			// No call this time (say the plan is Wait): the key comes back
			// by itself later.
			active.Add(1)
			go func() { time.Sleep(time.Millisecond); queue.Add(key); active.Add(-1) }()
			return
		}
		lane := slot{name: lanes[rand.IntN(len(lanes))], limit: 2}
		if !c.start(key, lane) {
			return
		}
		active.Add(1)
		go func() {
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
			left[i].Add(-1)
			c.finish(key)
			check()
			queue.Add(key)
			active.Add(-1)
		}()
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				key, quit := queue.Get()
				if quit {
					return
				}
				active.Add(1)
				sync1(key)
				syncDone(c, key)
				check()
				queue.Done(key)
				active.Add(-1)
			}
		}()
	}
	active.Add(1)
	go func() {
		defer active.Add(-1)
		for n := 0; n < 2000; n++ {
			queue.Add(fmt.Sprintf("k%d", rand.IntN(keys)))
			if n%50 == 0 {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}()
	for i := 0; i < keys; i++ {
		queue.Add(fmt.Sprintf("k%d", i))
	}
	// Done, or quiet for twenty looks in a row: nothing queued, nothing
	// running, nothing that could queue a key again.
	quietLooks := 0
	if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		done := true
		for i := range left {
			done = done && left[i].Load() == 0
		}
		if queue.Len() == 0 && active.Load() == 0 {
			quietLooks++
		} else {
			quietLooks = 0
		}
		return done || quietLooks >= 20, nil
	}); err != nil {
		t.Fatal("the lanes neither finished nor went quiet")
	}
	var stranded []string
	for i := range left {
		if n := left[i].Load(); n > 0 {
			stranded = append(stranded, fmt.Sprintf("k%d (%d calls left)", i, n))
		}
	}
	c.mu.Lock()
	remaining := len(c.lanes)
	c.mu.Unlock()
	if len(stranded) > 0 || remaining != 0 {
		t.Fatalf("all quiet, yet %d keys are stranded %v; lanes left %d", len(stranded), stranded, remaining)
	}
	queue.ShutDown()
	wg.Wait()
}

// syncDone is what the controller does at the end of every sync of key.
func syncDone(c *calls, key string) { c.settle(key) }

// checkLocked checks the lanes' invariant (caller holds mu, or is the
// only goroutine).
func (c *calls) checkLocked() error {
	for name, l := range c.lanes {
		if l.used() < l.limit && len(l.waiting) > 0 {
			return fmt.Errorf("lane %q has a free slot (%d of %d used) and keys waiting %v", name, l.used(), l.limit, l.waiting)
		}
	}
	return nil
}
