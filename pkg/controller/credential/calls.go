package credential

import (
	"net/url"
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
// revocation's (revocations have lanes of their own).

// Concurrent calls per lane.
var laneLimits = map[rotationv1alpha1.MinterType]int{
	rotationv1alpha1.MinterRandom: 16, rotationv1alpha1.MinterClientCertificate: 8,
	rotationv1alpha1.MinterServiceAccountToken: 8, rotationv1alpha1.MinterWebhook: 4,
}

type lane struct {
	limit, used int
	waiting     []string
}

// calls tracks the lanes and which keys have a call running.
type calls struct {
	mu       sync.Mutex
	lanes    map[string]*lane
	inFlight map[string]bool
	// requeue hands a key back to the controller's queue.
	requeue func(key string)
}

func newCalls(requeue func(string)) *calls {
	return &calls{lanes: map[string]*lane{}, inFlight: map[string]bool{}, requeue: requeue}
}

// laneOf names the lane of a minter call.
func laneOf(rc *rotationv1alpha1.RotatingCredential, step StepKind) (string, int) {
	t := rc.Spec.Minter.Type
	name := string(t) + " " + string(step)
	if w := rc.Spec.Minter.Webhook; t == rotationv1alpha1.MinterWebhook && w != nil {
		endpoint := w.URL
		if u, err := url.Parse(w.URL); err == nil {
			endpoint = strings.ToLower(u.Scheme + "://" + u.Host)
		}
		name += " " + endpoint
	}
	limit := laneLimits[t]
	if limit == 0 {
		limit = 1
	}
	return name, limit
}

// busy says whether key has a call running: its worker leaves it alone,
// and the call hands it back when it ends.
func (c *calls) busy(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight[key]
}

// start takes a slot of the lane for key, or puts key on the lane's
// waiting list and says no.
func (c *calls) start(key, name string, limit int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight[key] {
		return false
	}
	l := c.lanes[name]
	if l == nil {
		l = &lane{limit: limit}
		c.lanes[name] = l
	}
	if l.used >= l.limit {
		for _, k := range l.waiting {
			if k == key {
				return false
			}
		}
		l.waiting = append(l.waiting, key)
		return false
	}
	l.used++
	c.inFlight[key] = true
	return true
}

// finish frees key's slot and hands the lane's first waiting key back to
// the queue; a lane left empty is dropped (webhook endpoints come and go).
func (c *calls) finish(key, name string) {
	c.mu.Lock()
	delete(c.inFlight, key)
	l := c.lanes[name]
	var next string
	if l != nil {
		l.used--
		if len(l.waiting) > 0 {
			next, l.waiting = l.waiting[0], l.waiting[1:]
		}
		if l.used == 0 && len(l.waiting) == 0 {
			delete(c.lanes, name)
		}
	}
	c.mu.Unlock()
	if next != "" {
		c.requeue(next)
	}
}
