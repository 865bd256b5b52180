// Package peerverify verifies a TLS client's certificate chain once per
// connection and CA bundle instead of once per request.
//
// The generic server's client-certificate and front-proxy authenticators
// verify the peer's chain on every request: for kube-apiserver's front
// proxy, whose one certificate carries every request kube-apiserver
// forwards, and for a client that keeps its connection, the same
// verification again and again (4 to 5% of the server's CPU in the
// issuance benchmarks). The authenticators here verify the same way, with
// the same CA providers, and remember the result for the certificate of
// that connection (the *x509.Certificate the TLS handshake made, which no
// other connection shares), for as long as the CA bundle is the same one,
// the chain is valid, and at most a minute. They answer only when the
// certificate verifies; anything else falls through to the generic
// authenticators behind them, which give the usual errors.
package peerverify

import (
	"context"
	"crypto/x509"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
)

// TTL bounds how long a verification is reused on one connection.
const TTL = time.Minute

// maxEntries bounds the cache: past it, verifications are not kept (until
// expired ones are swept), so a flood of connections costs what it did.
const maxEntries = 4096

// Cache remembers verified peer certificates. The zero value is not
// usable; use New.
type Cache struct {
	now     func() time.Time
	mu      sync.Mutex
	entries map[*x509.Certificate]entry
}

type entry struct {
	roots *x509.CertPool
	// peers are the certificates the client sent: a connection that
	// sent other intermediates with the same leaf is verified anew.
	peers []*x509.Certificate
	chain []*x509.Certificate
	until time.Time
}

// New returns an empty cache; now is the clock (nil: time.Now).
func New(now func() time.Time) *Cache {
	if now == nil {
		now = time.Now
	}
	return &Cache{now: now, entries: map[*x509.Certificate]entry{}}
}

// verify returns the verified chain of the request's peer certificate
// under the provider's options, or nil when there is no peer certificate,
// no options, or it does not verify.
func (c *Cache) verify(req *http.Request, verifyOptions x509request.VerifyOptionFunc) []*x509.Certificate {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		return nil
	}
	opts, ok := verifyOptions()
	if !ok || opts.Roots == nil {
		return nil
	}
	leaf := req.TLS.PeerCertificates[0]
	now := c.now()
	c.mu.Lock()
	e, found := c.entries[leaf]
	c.mu.Unlock()
	if found && e.roots == opts.Roots && now.Before(e.until) && slices.Equal(e.peers, req.TLS.PeerCertificates) {
		return e.chain
	}
	// As the generic authenticators verify: the intermediates the client
	// sent, unless the provider gives its own.
	if opts.Intermediates == nil && len(req.TLS.PeerCertificates) > 1 {
		opts.Intermediates = x509.NewCertPool()
		for _, intermediate := range req.TLS.PeerCertificates[1:] {
			opts.Intermediates.AddCert(intermediate)
		}
	}
	opts.CurrentTime = now
	chains, err := leaf.Verify(opts)
	if err != nil || len(chains) == 0 {
		return nil
	}
	chain := chains[0]
	until := now.Add(TTL)
	for _, cert := range chain {
		if cert.NotAfter.Before(until) {
			until = cert.NotAfter
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= maxEntries {
		for k, old := range c.entries {
			if !now.Before(old.until) {
				delete(c.entries, k)
			}
		}
	}
	if len(c.entries) < maxEntries {
		c.entries[leaf] = entry{roots: opts.Roots, peers: slices.Clone(req.TLS.PeerCertificates), chain: chain, until: until}
	}
	return chain
}

// len is the number of remembered verifications (tests).
func (c *Cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// FrontProxy authenticates requests from an authenticating proxy, as the
// generic request-header authenticator does: the peer certificate must
// verify against the proxy's CA bundle and name an allowed common name
// (any, if the list is empty); the user is then read from the request's
// headers, on every request.
func FrontProxy(cache *Cache, verifyOptions x509request.VerifyOptionFunc, allowedNames headerrequest.StringSliceProvider, headers authenticator.Request) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		chain := cache.verify(req, verifyOptions)
		if chain == nil {
			return nil, false, nil
		}
		if allowed := allowedNames.Value(); len(allowed) > 0 && !slices.Contains(allowed, chain[0].Subject.CommonName) {
			return nil, false, nil
		}
		resp, ok, err := headers.AuthenticateRequest(req)
		if ok && err == nil {
			recordFrontProxied(req)
		}
		return resp, ok, err
	})
}

// ClientCertificate authenticates requests by their client certificate,
// as the generic x509 authenticator does: the chain must verify against
// the client CA bundle, and user converts it (x509request.CommonNameUserConversion).
func ClientCertificate(cache *Cache, verifyOptions x509request.VerifyOptionFunc, user x509request.UserConversion) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		chain := cache.verify(req, verifyOptions)
		if chain == nil {
			return nil, false, nil
		}
		resp, ok, err := user.User(chain)
		if err != nil || !ok {
			return nil, false, nil
		}
		return resp, true, nil
	})
}

// frontProxiedKey holds, in a request's context, whether the front proxy
// authenticated the request (set by FrontProxy, read by ViaFrontProxy).
type frontProxiedKey struct{}

// WithFrontProxyRecord gives every request a place, in its context, where
// FrontProxy records that it authenticated it. It must wrap the handler
// chain outside authentication, whose context the later filters inherit.
func WithFrontProxyRecord(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		handler.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), frontProxiedKey{}, new(atomic.Bool))))
	})
}

// ViaFrontProxy says whether FrontProxy authenticated the request whose
// context this is: kube-apiserver's aggregator forwarded it, after
// authenticating and authorizing it itself. False when the request came
// some other way, or the generic authenticator behind FrontProxy took it.
func ViaFrontProxy(ctx context.Context) bool {
	rec, ok := ctx.Value(frontProxiedKey{}).(*atomic.Bool)
	return ok && rec.Load()
}

func recordFrontProxied(req *http.Request) {
	if rec, ok := req.Context().Value(frontProxiedKey{}).(*atomic.Bool); ok {
		rec.Store(true)
	}
}
