// Package authnready holds the requests that reach a freshly started
// server before its delegated authentication can verify them.
//
// The generic server loads the client and front-proxy CAs from the
// extension-apiserver-authentication ConfigMap through an informer whose
// first "load" at start reads an empty lister, so for the moment between
// the listener opening and that informer's first sync every certificate
// fails to verify: a client certificate gets 401 and a request forwarded by
// kube-apiserver is seen as system:anonymous (403). Both fail closed but are
// wrong answers to a valid request. The Gate holds requests (health checks
// excepted) until every CA the ConfigMap publishes is loaded, and answers
// 503 with Retry-After, which client-go retries, if that takes too long.
package authnready

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/klog/v2"
)

// Source is one CA bundle the server verifies certificates with, loaded
// from Key of the authentication ConfigMap.
type Source struct {
	Provider dynamiccertificates.CAContentProvider
	Key      string
}

// Keys returns the keys of the authentication ConfigMap that hold content.
type Keys func(ctx context.Context) (map[string]bool, error)

// Gate is open once every Source whose key the ConfigMap holds has content.
type Gate struct {
	ready   chan struct{}
	sources []Source
	keys    Keys
	// hold is how long a request waits for the gate before it gets 503;
	// giveUp how long Run waits before it opens the gate regardless.
	hold, giveUp time.Duration
}

// New returns a gate over sources, open at once when there are none (CAs
// from files are read before the server serves). Otherwise Run opens it
// when the sources the ConfigMap publishes have loaded (keys is asked
// until it answers; a CA the ConfigMap lacks is not used, so not waited
// for), or after giveUp: then the generic server's own fail-closed
// behaviour is all there is, as without the gate, and that is logged.
func New(sources []Source, keys Keys, hold, giveUp time.Duration) *Gate {
	g := &Gate{ready: make(chan struct{}), sources: sources, keys: keys, hold: hold, giveUp: giveUp}
	if len(sources) == 0 {
		close(g.ready)
	}
	return g
}

// Run opens the gate as New says; it returns when the gate is open.
func (g *Gate) Run(ctx context.Context) {
	select {
	case <-g.ready:
		return
	default:
	}
	logger := klog.FromContext(ctx)
	defer close(g.ready)
	ctx, cancel := context.WithTimeout(ctx, g.giveUp)
	defer cancel()

	changed := make(chan struct{}, 1)
	for _, s := range g.sources {
		s.Provider.AddListener(listener(changed))
	}
	var present map[string]bool
	err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 2 * time.Second}, func(ctx context.Context) (bool, error) {
		var err error
		present, err = g.keys(ctx)
		if err != nil {
			logger.V(2).Info("Reading the authentication ConfigMap failed; retrying", "err", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		logger.Error(err, "Serving without knowing which authentication CAs to wait for", "waited", g.giveUp)
		return
	}
	for {
		missing := missing(g.sources, present)
		if len(missing) == 0 {
			logger.V(2).Info("Authentication CAs loaded")
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			logger.Error(ctx.Err(), "Authentication CAs not loaded; serving anyway (certificates they would verify are refused)", "missing", missing, "waited", g.giveUp)
			return
		}
	}
}

// missing names the sources the ConfigMap publishes that have no content.
func missing(sources []Source, present map[string]bool) []string {
	var out []string
	for _, s := range sources {
		if present[s.Key] && len(s.Provider.CurrentCABundleContent()) == 0 {
			out = append(out, s.Key)
		}
	}
	return out
}

type listener chan struct{}

func (l listener) Enqueue() {
	select {
	case l <- struct{}{}:
	default:
	}
}

// Check is a readyz check: not ready until the gate is open.
func (g *Gate) Check(*http.Request) error {
	select {
	case <-g.ready:
		return nil
	default:
		return fmt.Errorf("the authentication CAs from kube-system/extension-apiserver-authentication are not loaded yet")
	}
}

// WithHold wraps handler: until the gate is open, a request waits for it
// (up to the hold), and past the hold gets 503 with Retry-After. Health
// checks pass at once: a probe must see the server's state, not wait.
func (g *Gate) WithHold(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		select {
		case <-g.ready:
			handler.ServeHTTP(w, req)
			return
		default:
		}
		if isHealthCheck(req.URL.Path) {
			handler.ServeHTTP(w, req)
			return
		}
		timer := time.NewTimer(g.hold)
		defer timer.Stop()
		select {
		case <-g.ready:
			handler.ServeHTTP(w, req)
		case <-req.Context().Done():
			// The client went away; nothing to answer.
		case <-timer.C:
			status := apierrors.NewServiceUnavailable("the server is starting: its authentication CAs are not loaded yet").Status()
			status.Kind, status.APIVersion = "Status", "v1"
			body, _ := json.Marshal(&status)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write(append(body, '\n'))
		}
	})
}

func isHealthCheck(path string) bool {
	for _, p := range []string{"/healthz", "/livez", "/readyz"} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}
