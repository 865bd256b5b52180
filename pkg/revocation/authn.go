package revocation

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/klog/v2"
)

// DefaultSyncHold is how long WithAuthenticator holds a certificate's
// request while the set has not synced yet (right after a start).
const DefaultSyncHold = 10 * time.Second

// WithAuthenticator wraps the server's whole authenticator: a user whose
// extra credential-id names a revoked certificate fails authentication
// (401), whichever authenticator took the request: a client certificate
// verified by rekey itself, or the front proxy's forwarded extra (a request
// kube-apiserver authenticated with that certificate and forwarded).
//
// Before the set has synced, a request that carries a certificate's
// credential-id waits for it (up to hold): the set normally loads within a
// second of the start, and answering meanwhile would either let a revoked
// certificate through (fail open) or refuse every certificate with a 401
// that clients do not retry (fail closed). Past the hold the request goes
// on, with an error logged: the set that cannot load means the server's own
// storage does not answer, and then the request fails anyway. Requests
// without such a credential-id (the controllers' own token, which the
// informer that fills the set needs, service account tokens) never wait.
//
// A refusal is logged at Info once per certificate per RefusalLogInterval
// (at V(4) otherwise): the holder of a revoked certificate chooses how
// often it is refused, and must not be able to flood the log with it.
// rekey_revocation_authentication_refused_total counts every one.
func WithAuthenticator(set *Set, inner authenticator.Request, hold time.Duration) authenticator.Request {
	return withAuthenticator(set, inner, hold, newRefusalLog(RefusalLogInterval, time.Now))
}

func withAuthenticator(set *Set, inner authenticator.Request, hold time.Duration, refusals *refusalLog) authenticator.Request {
	RegisterMetrics()
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		resp, ok, err := inner.AuthenticateRequest(req)
		if !ok || err != nil || resp == nil || resp.User == nil {
			return resp, ok, err
		}
		ids := resp.User.GetExtra()[CredentialIDKey]
		if len(ids) == 0 {
			return resp, ok, err
		}
		var sums [][32]byte
		for _, id := range ids {
			if sum, isCert := ParseCredentialID(id); isCert {
				sums = append(sums, sum)
			}
		}
		if len(sums) == 0 {
			return resp, ok, err
		}
		if !set.HasSynced() && !waitForSync(req.Context(), set, hold) {
			klog.FromContext(req.Context()).Error(nil, "Revocations not loaded: authenticating a certificate without checking whether it is revoked", "user", resp.User.GetName(), "credentialID", ids, "waited", hold)
			return resp, ok, err
		}
		for _, sum := range sums {
			if e, revoked := set.Lookup(sum); revoked {
				authnRefused.Inc()
				reason := DenyReason(&e)
				logger := klog.FromContext(req.Context())
				if !refusals.first(sum) {
					logger = logger.V(4)
				}
				logger.Info("Refusing a revoked certificate", "user", resp.User.GetName(), "credentialID", CredentialIDPrefix+Hex(sum), "reason", e.Reason, "revocationTime", e.RevocationTime)
				return nil, false, errors.New(reason)
			}
		}
		return resp, ok, err
	})
}

func waitForSync(ctx context.Context, set *Set, hold time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, hold)
	defer cancel()
	return set.WaitForSync(ctx)
}

// RefusalLogInterval is how often a revoked certificate's refusal is logged
// at Info at most.
const RefusalLogInterval = time.Minute

// refusalLogSize bounds the certificates refusalLog remembers: past it,
// certificates not seen yet are logged only at V(4) until older ones age
// out (a flood of distinct revoked certificates is still counted).
const refusalLogSize = 4096

// refusalLog remembers when each revoked certificate's refusal was last
// logged at Info.
type refusalLog struct {
	interval time.Duration
	now      func() time.Time
	mu       sync.Mutex
	last     map[[32]byte]time.Time
}

func newRefusalLog(interval time.Duration, now func() time.Time) *refusalLog {
	return &refusalLog{interval: interval, now: now, last: map[[32]byte]time.Time{}}
}

// first reports whether sum's refusal is the first in its interval (and
// records it).
func (l *refusalLog) first(sum [32]byte) bool {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.last[sum]; ok && now.Sub(t) < l.interval {
		return false
	}
	if len(l.last) >= refusalLogSize {
		for k, t := range l.last {
			if now.Sub(t) >= l.interval {
				delete(l.last, k)
			}
		}
		if len(l.last) >= refusalLogSize {
			return false
		}
	}
	l.last[sum] = now
	return true
}
