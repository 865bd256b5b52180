package credential

import (
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
)

// Minter calls run off the workers, each in a lane with its own bound on
// concurrent calls: a lane per minter type and operation, and for webhooks
// per endpoint (scheme, host and port) and operation. A worker that finds
// a lane full puts the key on the lane's waiting list and goes on with the
// next key; the lane hands the key back to the queue when one of its calls
// ends. So a hanging minter holds only its own lane's slots: never a
// worker, never another minter's or another endpoint's slots, and never a
// revocation's (revocations have lanes of their own). Webhook calls also
// share one bound per operation across every endpoint (webhookCallLimit):
// the price is that endpoints hanging together can hold up to that many
// calls of other endpoints.

// Concurrent calls per lane.
// webhookCallLimit bounds the webhook mints, and separately the webhook
// revocations, running at once across every endpoint.
const webhookCallLimit = 64

var laneLimits = map[rotationv1alpha1.MinterType]int{
	rotationv1alpha1.MinterRandom: 16, rotationv1alpha1.MinterClientCertificate: 8,
	rotationv1alpha1.MinterServiceAccountToken: 8, rotationv1alpha1.MinterWebhook: 4,
}

// slot names a lane and its bound.
type slot struct {
	name  string
	limit int
}

// A lane's used slots are its running calls and the slots it handed to a
// waiting key that has not come back for it yet (promised). The lanes keep
// one invariant, which is what guarantees that no key is left waiting on
// an idle lane: a lane with a free slot (used < limit) has nobody waiting.
// A key waits only on a full lane; a freed slot goes at once to the first
// waiting key as a promise (so the lane stays full), and a promise the key
// does not use by the end of its next sync (its plan changed, it was
// deleted, it was already started another way) is freed again the same
// way. A key leaves every waiting list when it starts a call.
type lane struct {
	limit, running int
	promised       map[string]bool
	waiting        []string
}

func (l *lane) used() int { return l.running + len(l.promised) }

// calls tracks the lanes and which keys have a call running.
type calls struct {
	mu    sync.Mutex
	lanes map[string]*lane
	// inFlight is the lanes whose slots a key's running call holds.
	inFlight map[string][]string
	// waitingIn is the lane whose waiting list has a key (at most one).
	waitingIn map[string]string
	// promisedIn is the lanes that handed a key a slot.
	promisedIn map[string][]string
	// requeue hands a key back to the controller's queue.
	requeue func(key string)
}

func newCalls(requeue func(string)) *calls {
	return &calls{lanes: map[string]*lane{}, inFlight: map[string][]string{}, waitingIn: map[string]string{},
		promisedIn: map[string][]string{}, requeue: requeue}
}

// laneOf names the lanes of a minter call: the call needs a slot in each.
// A webhook call needs one in its endpoint's lane and one in the lane of
// every webhook call of that operation, so that N credentials at N
// endpoints make at most webhookCallLimit calls at once, not N.
func laneOf(rc *rotationv1alpha1.RotatingCredential, step StepKind) []slot {
	t := rc.Spec.Minter.Type
	name := string(t) + " " + string(step)
	limit := laneLimits[t]
	if limit == 0 {
		limit = 1
	}
	if w := rc.Spec.Minter.Webhook; t == rotationv1alpha1.MinterWebhook && w != nil {
		return []slot{{name: name + " " + endpointOf(w.URL), limit: limit}, {name: name + " (every endpoint)", limit: webhookCallLimit}}
	}
	return []slot{{name: name, limit: limit}}
}

// endpointOf is a URL's endpoint in one spelling: the scheme and host in
// lower case, the host without a trailing dot and an IP address in its
// canonical form (an IPv4 address written as IPv6 as IPv4), and the port
// always written, as a plain number (the scheme's default when absent).
// Host names that resolve to the same address remain different endpoints
// (the global bound covers them).
func endpointOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return strings.ToLower(raw) // refused by validation; the call fails
	}
	scheme := strings.ToLower(u.Scheme)
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().String()
	}
	port := u.Port()
	if n, err := strconv.ParseUint(port, 10, 16); err == nil {
		port = strconv.FormatUint(n, 10)
	} else if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[scheme]
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// busy says whether key has a call running: its worker leaves it alone,
// and the call hands it back when it ends.
func (c *calls) busy(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.inFlight[key]
	return ok
}

// start takes a slot in every one of lanes for key (a slot it was handed
// or a free one), or puts key on the waiting list of the first lane that
// is full for it and says no.
func (c *calls) start(key string, lanes ...slot) bool {
	c.mu.Lock()
	var wake []string
	defer func() {
		c.mu.Unlock()
		c.wake(wake)
	}()
	if _, ok := c.inFlight[key]; ok {
		return false
	}
	for _, s := range lanes {
		l := c.lanes[s.name]
		if l == nil {
			l = &lane{limit: s.limit, promised: map[string]bool{}}
			c.lanes[s.name] = l
		}
		if !l.promised[key] && l.used() >= l.limit {
			// Slots handed to key elsewhere go on to the next waiters
			// rather than idle while key waits here.
			wake = c.unpromise(key, wake)
			if c.waitingIn[key] != s.name {
				// A key already waiting here keeps its place in line.
				c.unwait(key)
				l.waiting = append(l.waiting, key)
				c.waitingIn[key] = s.name
			}
			for _, s := range lanes {
				if l := c.lanes[s.name]; l != nil && l.used() == 0 && len(l.waiting) == 0 {
					delete(c.lanes, s.name)
				}
			}
			return false
		}
	}
	// Starting: off any waiting list (which may drop an idle lane it
	// waited in: made again below if it is one of lanes).
	c.unwait(key)
	names := make([]string, 0, len(lanes))
	for _, s := range lanes {
		l := c.lanes[s.name]
		if l == nil {
			l = &lane{limit: s.limit, promised: map[string]bool{}}
			c.lanes[s.name] = l
		}
		delete(l.promised, key)
		l.running++
		names = append(names, s.name)
	}
	c.promisedIn[key] = slices.DeleteFunc(c.promisedIn[key], func(n string) bool { return slices.Contains(names, n) })
	// A slot handed to key in a lane it does not call in now goes on.
	wake = c.unpromise(key, wake)
	c.inFlight[key] = names
	return true
}

// finish frees key's slots, each going to its lane's first waiting key.
func (c *calls) finish(key string) {
	c.mu.Lock()
	var wake []string
	for _, name := range c.inFlight[key] {
		if l := c.lanes[name]; l != nil {
			l.running--
			wake = c.free(name, wake)
		}
	}
	delete(c.inFlight, key)
	c.mu.Unlock()
	c.wake(wake)
}

// settle ends a sync of key: a slot it was handed and did not take goes
// on to the next waiting key.
func (c *calls) settle(key string) {
	c.mu.Lock()
	wake := c.unpromise(key, nil)
	c.mu.Unlock()
	c.wake(wake)
}

func (c *calls) wake(keys []string) {
	for _, k := range keys {
		c.requeue(k)
	}
}

// free gives a slot just freed in lane name to the first waiting key (a
// promise: the lane stays full for the others), or leaves it free; an idle
// lane with nobody waiting is dropped (webhook endpoints come and go).
// Under mu.
func (c *calls) free(name string, wake []string) []string {
	l := c.lanes[name]
	for len(l.waiting) > 0 {
		k := l.waiting[0]
		l.waiting = l.waiting[1:]
		delete(c.waitingIn, k)
		if _, running := c.inFlight[k]; running {
			continue // cannot happen: start takes a key off the list
		}
		l.promised[k] = true
		c.promisedIn[k] = append(c.promisedIn[k], name)
		return append(wake, k)
	}
	l.waiting = nil
	if l.used() == 0 {
		delete(c.lanes, name)
	}
	return wake
}

// unpromise frees the slots handed to key. Under mu.
func (c *calls) unpromise(key string, wake []string) []string {
	for _, name := range c.promisedIn[key] {
		if l := c.lanes[name]; l != nil && l.promised[key] {
			delete(l.promised, key)
			wake = c.free(name, wake)
		}
	}
	delete(c.promisedIn, key)
	return wake
}

// unwait takes key off its waiting list. Under mu.
func (c *calls) unwait(key string) {
	name, ok := c.waitingIn[key]
	if !ok {
		return
	}
	delete(c.waitingIn, key)
	if l := c.lanes[name]; l != nil {
		l.waiting = slices.DeleteFunc(l.waiting, func(k string) bool { return k == key })
		if l.used() == 0 && len(l.waiting) == 0 {
			delete(c.lanes, name)
		}
	}
}
