package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// ErrNotLeading is the error of a leader-only write made while this replica
// does not hold leadership: its lease deadline passed (the process was
// stopped, or could not renew the lease) or the term ended.
var ErrNotLeading = errors.New("this replica is not the leader (lease deadline passed or leadership lost); leader-only write refused")

var (
	fencedWrites = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "rekey", Subsystem: "leader", Name: "fenced_writes_total",
		Help:           "Leader-only writes refused because this replica was not leading when they were sent (its lease deadline had passed), by target (api: the controllers' API clients; etcd: their direct etcd writes).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"target"})
	registerOnce sync.Once
)

// RegisterMetrics adds the leader election metrics to the /metrics registry.
func RegisterMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(fencedWrites) })
}

// Targets of rekey_leader_fenced_writes_total.
const (
	TargetAPI  = "api"
	TargetEtcd = "etcd"
)

// Fence says whether this replica leads at this moment, by the local lease
// deadline its own keepalives keep (the monotonic time the last successful
// keepalive was sent plus the TTL etcd granted): etcd cannot have expired
// the lease before then, and may have any time after. Leader-only writers
// check it when they send, so that a replica whose process was stopped
// past its lease (SIGSTOP, the cgroup freezer, a long GC, CPU throttling)
// and resumed refuses its leader-only writes from the deadline on, whatever
// its goroutines have not noticed yet.
//
// What it does not do:
//   - It decides when a write is sent, not when it lands: a write sent
//     before the deadline (a request the fenced client already passed to
//     the server, which may be this same process, stopped with it) can be
//     applied after it, while another replica leads. A late
//     compare-and-swap (a binding's revision, an object's resourceVersion)
//     conflicts instead of undoing the new leader's write; a write without
//     a precondition (a patch, an unconditional delete such as pruning
//     issuance records, an Event) is applied as it was sent.
//   - It reads the monotonic clock, which stops with a paused VM or a
//     suspended host: such a guest leads on resume until its next
//     keepalive is refused, and only the writes' own preconditions
//     protect the new leader's.
//   - It fences only the writes that check it: the wrapped clients
//     (WrapTransport) and direct etcd writes made with a context that
//     carries it (CheckContext).
//
// A nil *Fence always leads: that is the replica without leader election
// (every replica runs the controllers).
type Fence struct {
	// term is the lease of the current leadership term, nil between terms.
	term atomic.Pointer[lease]
}

// NewFence returns a fence that does not lead until an election (Run with
// Config.Fence) wins.
func NewFence() *Fence { return &Fence{} }

// Leading reports whether this replica holds leadership now: in a term and
// before its lease deadline.
func (f *Fence) Leading() bool {
	if f == nil {
		return true
	}
	l := f.term.Load()
	return l != nil && l.live(time.Now())
}

// Check returns ErrNotLeading, counted under target, when not leading.
func (f *Fence) Check(target string) error {
	if f.Leading() {
		return nil
	}
	fencedWrites.WithLabelValues(target).Inc()
	return ErrNotLeading
}

func (f *Fence) begin(l *lease) {
	l.leading.Store(true)
	f.term.Store(l)
}

// end closes the term of l (a later term's lease is left alone).
func (f *Fence) end(l *lease) { f.term.CompareAndSwap(l, nil) }

type fenceKey struct{}

// WithFence returns ctx carrying f, for FromContext.
func WithFence(ctx context.Context, f *Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FromContext returns the fence of the leadership term ctx belongs to (the
// work context of Run carries it), nil (always leading) for a context of
// no term.
func FromContext(ctx context.Context) *Fence {
	f, _ := ctx.Value(fenceKey{}).(*Fence)
	return f
}

// CheckContext is Check on the fence ctx carries: for direct etcd writes of
// leader-only work, made with the work context. A context that carries no
// fence passes (that is the replica without leader election), so leader
// work must make its writes with a context derived from the work context,
// not context.Background or another term's.
func CheckContext(ctx context.Context, target string) error {
	return FromContext(ctx).Check(target)
}

// WrapTransport refuses every request but reads (GET, HEAD, OPTIONS: gets,
// lists and watches) while the fence does not lead, at the moment the
// request is sent. It is a rest.Config WrapTransport for the clients only
// the leader's work uses; with a nil fence it returns rt unchanged.
func (f *Fence) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	if f == nil {
		return rt
	}
	return &fencedTransport{next: rt, fence: f}
}

type fencedTransport struct {
	next  http.RoundTripper
	fence *Fence
}

func (t *fencedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		if err := t.fence.Check(TargetAPI); err != nil {
			// The body is the caller's to close once RoundTrip returns,
			// even on an error (http.RoundTripper's contract).
			if req.Body != nil {
				_ = req.Body.Close()
			}
			klog.FromContext(req.Context()).V(2).Info("Refused a leader-only write: not leading", "method", req.Method, "path", req.URL.Path)
			return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
		}
	}
	return t.next.RoundTrip(req)
}

// WrappedRoundTripper lets client-go's debugging wrappers see through.
func (t *fencedTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

// lease is one etcd lease's local deadline.
type lease struct {
	mu       sync.Mutex
	deadline time.Time // with a monotonic reading: from time.Now
	lostOnce sync.Once
	lost     chan struct{}
	// leading is set once the lease's term began (for the log line).
	leading atomic.Bool
}

func newLease(deadline time.Time) *lease {
	return &lease{deadline: deadline, lost: make(chan struct{})}
}

func (l *lease) live(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return now.Before(l.deadline)
}

func (l *lease) getDeadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// extend moves the deadline to d if that is later. It does nothing once
// the lease is lost: a keepalive that succeeds after the deadline passed
// (the lease then still existed in etcd) does not revive a term whose work
// is being stopped.
func (l *lease) extend(d time.Time) {
	select {
	case <-l.lost:
		return
	default:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !time.Now().Before(l.deadline) {
		return
	}
	if d.After(l.deadline) {
		l.deadline = d
	}
}

// wait waits d; false when ctx is done or the lease is lost first.
func (l *lease) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-l.lost:
		return false
	case <-t.C:
		return true
	}
}

// lose marks the lease lost (once) and makes live false from now on.
func (l *lease) lose() {
	l.lostOnce.Do(func() {
		l.mu.Lock()
		if now := time.Now(); now.Before(l.deadline) {
			l.deadline = now
		}
		l.mu.Unlock()
		close(l.lost)
	})
}
