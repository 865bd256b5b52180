package credential

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
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
	// Two endpoints under a shared bound smaller than their sum, as the
	// webhook lanes are, and a lane of its own.
	every := slot{name: "Webhook Revoke (every endpoint)", limit: 3}
	lanes := [][]slot{{{name: "Webhook Revoke https://a:443", limit: 2}, every}, {{name: "Webhook Revoke https://b:443", limit: 2}, every},
		{{name: "Random Revoke", limit: 2}}}
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
		if _, err := fmt.Sscanf(key, "k%d", &i); err != nil {
			t.Errorf("key %q: %v", key, err)
			return
		}
		if left[i].Load() == 0 {
			return
		}
		if rand.IntN(8) == 0 {
			// No call this time (say the plan is Wait): the key comes back
			// by itself later (after whatever runs meanwhile).
			active.Add(1)
			go func() { yield(64); queue.Add(key); active.Add(-1) }()
			return
		}
		if !c.start(key, lanes[rand.IntN(len(lanes))]...) {
			return
		}
		active.Add(1)
		go func() {
			yield(rand.IntN(200)) // the call takes a while
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
				yield(100)
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

// yield lets the other goroutines run n times over: the stress test's
// calls and delays take turns instead of wall-clock time, so that it
// interleaves as much on a loaded machine as on an idle one.
func yield(n int) {
	for range n {
		runtime.Gosched()
	}
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

// TestWebhookLaneIsTheEndpointHowEverSpelled: one endpoint is one lane
// (and one bound) whatever the spelling of its URL: case, a trailing dot,
// the default port written or not, leading zeros in the port, an IPv6
// address's forms, an IPv4 address written as IPv6.
func TestWebhookLaneIsTheEndpointHowEverSpelled(t *testing.T) {
	for want, spellings := range map[string][]string{
		"Webhook Mint https://hook.example:443": {"https://hook.example/p", "https://hook.example:443/p", "https://hook.example./p",
			"https://HOOK.example:0443/p", "HTTPS://Hook.Example.:443/other?q=1"},
		"Webhook Mint https://hook.example:8443": {"https://hook.example:8443", "https://hook.example.:08443/x"},
		"Webhook Mint http://hook.example:80":    {"http://hook.example", "http://hook.example:80"},
		"Webhook Mint https://[::1]:8443":        {"https://[::1]:8443", "https://[0:0::1]:8443", "https://[0000::0001]:08443"},
		"Webhook Mint https://127.0.0.1:443":     {"https://127.0.0.1", "https://[::ffff:127.0.0.1]:443"},
	} {
		for _, u := range spellings {
			if got := laneOf(webhookRC("x", u, nil), StepMint)[0].name; got != want {
				t.Errorf("lane of %s = %q, want %q", u, got, want)
			}
		}
	}
}

// TestWebhookCallsHaveAGlobalBound: N credentials at N endpoints do not
// make N concurrent calls: at most webhookCallLimit mints (and as many
// revocations, which have a bound of their own) run at once across every
// endpoint; the next waits and is handed back when one ends.
func TestWebhookCallsHaveAGlobalBound(t *testing.T) {
	var woken []string
	c := newCalls(func(k string) { woken = append(woken, k) })
	rc := func(i int) []slot {
		return laneOf(webhookRC(fmt.Sprint(i), fmt.Sprintf("https://hook-%d.example", i), nil), StepMint)
	}
	for i := 0; i < webhookCallLimit; i++ {
		if !c.start(fmt.Sprint(i), rc(i)...) {
			t.Fatalf("call %d at its own endpoint found no slot", i)
		}
	}
	next := fmt.Sprint(webhookCallLimit)
	if c.start(next, rc(webhookCallLimit)...) {
		t.Fatalf("a call beyond %d concurrent webhook mints started", webhookCallLimit)
	}
	revoke := laneOf(webhookRC("r", "https://hook-r.example", nil), StepRevoke)
	if !c.start("r", revoke...) {
		t.Fatal("webhook mints at their bound held a revocation")
	}
	if err := c.checkLocked(); err != nil {
		t.Fatal(err)
	}
	c.finish("0")
	if !slices.Equal(woken, []string{next}) {
		t.Fatalf("handed back %v, want [%s]", woken, next)
	}
	if !c.start(next, rc(webhookCallLimit)...) {
		t.Fatal("the waiting call found no slot when one was freed")
	}
}

// TestWaitingKeyKeepsItsPlace: a key already waiting on a full lane that is
// synced again (an informer event, a resync) keeps its place in the line:
// it went to the back before, so a key woken often could wait for ever
// behind keys that are not.
func TestWaitingKeyKeepsItsPlace(t *testing.T) {
	var woken []string
	c := newCalls(func(k string) { woken = append(woken, k) })
	lane := slot{name: "Webhook Mint https://h:443", limit: 1}
	for _, k := range []string{"A", "B", "C", "B", "B"} {
		if got := c.start(k, lane); got != (k == "A") {
			t.Fatalf("start(%s) = %v", k, got)
		}
		if err := c.checkLocked(); err != nil {
			t.Fatal(err)
		}
	}
	c.finish("A")
	if !slices.Equal(woken, []string{"B"}) {
		t.Fatalf("handed the slot to %v, want B (first in line, synced again twice while waiting)", woken)
	}
}
