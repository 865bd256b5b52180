// Package publicpaths serves the few paths rekey answers without
// authentication or authorization: the revocation webhook
// (/revocation/authorize, called by kube-apiserver) and the CRLs (/crl/...,
// fetched by anyone verifying a certificate). They sit in front of the
// generic handler chain, and of the authnready gate: they need no client CA,
// and what they reveal is public (a CRL lists what is revoked; the webhook
// only ever answers Deny or NoOpinion, never Allow).
//
// The options make a Mux and put it outermost in the handler chain; the
// server registers handlers on it while it is assembled (the handlers need
// parts that exist only then), before it serves. A request whose path no
// pattern matches goes on to the generic chain unchanged.
//
// Outside the generic chain they have neither its request timeout nor its
// in-flight limit: each handler bounds its own reading and writing (the
// webhook's deadlines), and the Mux bounds how many requests each pattern
// serves at once (DefaultMaxInFlight), answering 429 with Retry-After
// beyond. Each pattern has its own budget, so that a flood of CRL
// downloads does not starve the webhook. A flood of the webhook itself
// makes kube-apiserver's calls get 429, on which it applies its
// failurePolicy: docs/revocation.md (Limits) says to let only
// kube-apiserver and the clients that need it reach rekey's port, and to
// choose failurePolicy Deny when an attacker on that network is in the
// threat model.
package publicpaths

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"rekey.io/rekey/pkg/apiserver/filters"
)

// Mux holds the public paths. The zero value is not usable: use New.
// Handle may be called while requests are served (a copy-on-write table
// read without a lock).
type Mux struct {
	routes      atomic.Pointer[[]route]
	maxInFlight atomic.Int64
}

type route struct {
	pattern string
	prefix  bool
	handler http.Handler
	// inFlight counts the pattern's requests being served.
	inFlight *atomic.Int64
}

// DefaultMaxInFlight is how many requests each pattern serves at once by
// default: far above what kube-apiserver's webhook calls (answered in
// microseconds) or CRL fetchers need, low enough that slow clients cannot
// hold an unbounded number of goroutines and buffers.
const DefaultMaxInFlight = 512

// New returns a Mux with no paths.
func New() *Mux {
	m := &Mux{}
	m.routes.Store(&[]route{})
	m.maxInFlight.Store(DefaultMaxInFlight)
	return m
}

// SetMaxInFlight sets how many requests each pattern serves at once
// (n <= 0: DefaultMaxInFlight).
func (m *Mux) SetMaxInFlight(n int) {
	if m == nil {
		return
	}
	if n <= 0 {
		n = DefaultMaxInFlight
	}
	m.maxInFlight.Store(int64(n))
}

// Handle serves pattern with handler, without authentication. A pattern
// ending in "/" (e.g. "/crl/") matches every path under it; any other
// pattern (e.g. "/revocation/authorize") matches that path only. The longest
// matching pattern wins; registering a pattern again replaces its handler.
// Unlike http.ServeMux, nothing is ever redirected ("/crl" is not sent to
// "/crl/", paths are not cleaned): an API server must not answer 3xx, and
// every response of a public handler passes through filters.WithoutRedirects.
// The handler checks the method and the rest of the path itself.
func (m *Mux) Handle(pattern string, handler http.Handler) {
	if m == nil || pattern == "" || pattern[0] != '/' || handler == nil {
		return
	}
	old := *m.routes.Load()
	routes := make([]route, 0, len(old)+1)
	inFlight := &atomic.Int64{}
	for _, r := range old {
		if r.pattern != pattern {
			routes = append(routes, r)
		} else {
			inFlight = r.inFlight // the same budget for the new handler
		}
	}
	routes = append(routes, route{pattern: pattern, prefix: strings.HasSuffix(pattern, "/"), handler: filters.WithoutRedirects(handler), inFlight: inFlight})
	m.routes.Store(&routes)
}

// Match returns the handler for path, or nil when no pattern matches.
func (m *Mux) Match(path string) http.Handler {
	if r := m.match(path); r != nil {
		return r.handler
	}
	return nil
}

func (m *Mux) match(path string) *route {
	if m == nil {
		return nil
	}
	var best *route
	routes := *m.routes.Load()
	for i := range routes {
		r := &routes[i]
		if r.prefix && strings.HasPrefix(path, r.pattern) || !r.prefix && path == r.pattern {
			if best == nil || len(r.pattern) > len(best.pattern) {
				best = r
			}
		}
	}
	return best
}

// Wrap returns a handler that serves the public paths itself and hands
// every other request to next. A nil Mux returns next.
func (m *Mux) Wrap(next http.Handler) http.Handler {
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r := m.match(req.URL.Path); r != nil {
			n := r.inFlight.Add(1)
			defer r.inFlight.Add(-1)
			if limit := m.maxInFlight.Load(); n > limit {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "rekey: more than "+strconv.FormatInt(limit, 10)+" requests to "+r.pattern+" at once; retry later", http.StatusTooManyRequests)
				return
			}
			r.handler.ServeHTTP(w, req)
			return
		}
		next.ServeHTTP(w, req)
	})
}
