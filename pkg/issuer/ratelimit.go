package issuer

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
)

// Defaults of the per-requester limit on create-time issuance: a kubelet
// asks for a client and a serving certificate at start and again near the
// end of each one's lifetime, far below a burst of 20. One more every 10
// seconds bounds a flood to 360 certificates an hour per identity and
// replica, and still lets nodes that share one bootstrap token join: 20
// at once, then one every 10 seconds.
const (
	DefaultRequesterBurst    = 20
	DefaultRequesterInterval = 10 * time.Second
)

// RequesterLimiter is a token bucket per requester: burst tokens, one more
// every interval. It lives in one process (each replica has its own; see
// docs/operations.md) and holds a bucket only while it is not full, so its
// size follows the identities that issued recently, not all of them.
type RequesterLimiter struct {
	burst    float64
	interval time.Duration
	clock    clock.PassiveClock

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

// NewRequesterLimiter returns a limiter of burst tokens per identity, one
// more every interval; burst 0 (or a nil limiter) limits nothing.
func NewRequesterLimiter(burst int, interval time.Duration, clk clock.PassiveClock) *RequesterLimiter {
	return &RequesterLimiter{burst: float64(burst), interval: interval, clock: clk, buckets: map[string]*bucket{}}
}

// Take takes a token of id's bucket, or, when it is empty, takes nothing
// and says how long until the next token.
func (l *RequesterLimiter) Take(id string) (time.Duration, bool) {
	if l == nil || l.burst <= 0 || l.interval <= 0 {
		return 0, true
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b, ok := l.buckets[id]
	if !ok {
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[id] = b
	}
	b.tokens = l.refilled(b, now)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) * float64(l.interval)), false
}

func (l *RequesterLimiter) refilled(b *bucket, now time.Time) float64 {
	if elapsed := now.Sub(b.at); elapsed > 0 {
		return math.Min(l.burst, b.tokens+float64(elapsed)/float64(l.interval))
	}
	return b.tokens
}

// sweep drops, at most once per refill of a whole burst, the buckets that
// are full again (the same as no bucket).
func (l *RequesterLimiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < time.Duration(l.burst)*l.interval {
		return
	}
	l.lastSweep = now
	for id, b := range l.buckets {
		if l.refilled(b, now) >= l.burst {
			delete(l.buckets, id)
		}
	}
}

func (l *RequesterLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// limit takes a token of the requester's bucket for a create that rekey
// would decide now (review, attestation, signing), or refuses it with 429
// Too Many Requests and a Retry-After: nothing is stored, and client-go
// retries after the delay by itself. A refused request is not stored
// pending, because a pending request of an automatic signer would be
// approved and signed by the controllers anyway, which would not limit
// anything. The identity is spec.username, which the server stamps from
// the authenticated user; never the subject, which the requester writes.
func (s *Synchronous) limit(ctx context.Context, signer *certv1alpha1.Signer, csr *certv1alpha1.CertificateSigningRequest) error {
	wait, ok := s.Limiter.Take(csr.Spec.Username)
	if ok {
		return nil
	}
	createRateLimited.WithLabelValues(signer.Spec.SignerName).Inc()
	secs := int(math.Ceil(wait.Seconds()))
	klog.FromContext(ctx).V(2).Info("Create-time issuance refused: the requester is over its rate", "csr", csr.Name, "requester", csr.Spec.Username, "signerName", signer.Spec.SignerName, "retryAfterSeconds", secs)
	return apierrors.NewTooManyRequests(fmt.Sprintf("requester %q has created too many requests that %s decides at create; retry in %ds", csr.Spec.Username, signer.Spec.SignerName, secs), secs)
}
