package certificateauthority

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/jwtkey"
)

const (
	// quorumReadEvery is how old this replica's last quorum read of a
	// CertificateAuthority may be when signjwt judges a key by it: half
	// of jwtkey.ReplicaLag, so that the previous key's signing after
	// Prepared (at most this + quorumReadTimeout) stays within the lag
	// status.previous.tokensExpireTime budgets, whatever the watch cache
	// shows.
	quorumReadEvery = jwtkey.ReplicaLag / 2
	// quorumReadTimeout bounds one quorum read, which is part of the bound
	// above: quorumReadEvery + quorumReadTimeout < jwtkey.ReplicaLag.
	quorumReadTimeout = 10 * time.Second
)

// quorumReads remembers, per CertificateAuthority, this replica's last
// quorum read of it (GetOptions{} without a resourceVersion: from etcd,
// linearizable, never the watch cache) and makes at most one such read at
// a time per CA, which concurrent signers wait for and share.
type quorumReads struct {
	cas   rest.Getter
	clock clock.PassiveClock

	mu     sync.Mutex
	byName map[string]*quorumState
	// onWait, when set (tests), is called when a caller waits for a read
	// another started.
	onWait func()
}

type quorumState struct {
	// started counts the reads started; a read numbered above a count
	// taken earlier began after that moment.
	started uint64
	// last is the newest read's answer, gen its number and readAt when
	// it started (its answer is at least that fresh).
	last   *rotation.CertificateAuthority
	gen    uint64
	readAt time.Time
	// flight is the read in progress, if any.
	flight *quorumFlight
}

type quorumFlight struct {
	gen    uint64
	done   chan struct{}
	readAt time.Time
	ca     *rotation.CertificateAuthority
	err    error
}

// quorumView is one quorum read's answer as a caller saw it.
type quorumView struct {
	ca      *rotation.CertificateAuthority // nil: none made yet
	gen     uint64
	readAt  time.Time
	started uint64 // the reads started when the view was taken
}

func newQuorumReads(cas rest.Getter, clk clock.PassiveClock) *quorumReads {
	return &quorumReads{cas: cas, clock: clk, byName: map[string]*quorumState{}}
}

// last is the newest quorum read of name without reading: one lock, no
// I/O, what each token costs while the read is fresh.
func (q *quorumReads) last(name string) quorumView {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.byName[name]
	if s == nil {
		return quorumView{}
	}
	return quorumView{ca: s.last, gen: s.gen, readAt: s.readAt, started: s.started}
}

// fresh is the stored CertificateAuthority as a quorum read numbered above
// after answered it: the one in progress when it was started after that,
// else a new one (after the one in progress, if any, is done). Concurrent
// callers share one read.
func (q *quorumReads) fresh(ctx context.Context, name string, after uint64) (quorumView, error) {
	for {
		q.mu.Lock()
		s := q.byName[name]
		if s == nil {
			s = &quorumState{}
			q.byName[name] = s
		}
		if s.last != nil && s.gen > after {
			v := quorumView{ca: s.last, gen: s.gen, readAt: s.readAt, started: s.started}
			q.mu.Unlock()
			return v, nil
		}
		f := s.flight
		if f == nil {
			s.started++
			f = &quorumFlight{gen: s.started, done: make(chan struct{})}
			s.flight = f
			go q.read(ctx, name, s, f)
		} else if q.onWait != nil {
			q.onWait()
		}
		q.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return quorumView{}, fmt.Errorf("waiting for a quorum read of CertificateAuthority %q: %w", name, ctx.Err())
		}
		if f.gen > after {
			if f.err != nil {
				return quorumView{}, f.err
			}
			// What this read answered, even when a later one has
			// replaced it since: it began after the caller's moment.
			return quorumView{ca: f.ca, gen: f.gen, readAt: f.readAt, started: f.gen}, nil
		}
		// That read began before the caller's moment: start another.
	}
}

// read makes one quorum read for flight f. It does not end with the
// request that started it (others may be waiting for it), only with its
// own timeout.
func (q *quorumReads) read(ctx context.Context, name string, s *quorumState, f *quorumFlight) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), quorumReadTimeout)
	defer cancel()
	start := q.clock.Now()
	obj, err := q.cas.Get(ctx, name, &metav1.GetOptions{})
	var ca *rotation.CertificateAuthority
	if err == nil {
		var ok bool
		if ca, ok = obj.(*rotation.CertificateAuthority); !ok {
			err = fmt.Errorf("storage returned a %T, not a CertificateAuthority", obj)
		}
	}
	q.mu.Lock()
	f.ca, f.err, f.readAt = ca, err, start
	s.flight = nil
	if err == nil {
		s.last, s.gen, s.readAt = ca, f.gen, start
	}
	q.mu.Unlock()
	close(f.done)
}
