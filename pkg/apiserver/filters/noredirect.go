// Package filters holds rekey's own HTTP filters.
package filters

import (
	"encoding/json"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"
)

// WithoutRedirects makes sure no response is ever a 3xx. A redirect from an
// aggregated API server would be followed by clients with the credentials
// of the original request, or hand an attacker a way to bounce requests;
// the generic server redirects in a few places (e.g. /debug/pprof, path
// cleaning in net/http), so every 3xx is turned into a 404 without Location.
//
// The one 3xx that is not a redirect, 304 Not Modified, is avoided rather
// than rewritten: conditional request headers are dropped, so discovery
// answers 200 with the full document instead (a rewritten 304 would break
// kubectl's discovery cache).
func WithoutRedirects(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("If-None-Match") != "" || req.Header.Get("If-Modified-Since") != "" {
			req = req.Clone(req.Context())
			req.Header.Del("If-None-Match")
			req.Header.Del("If-Modified-Since")
		}
		d := &noRedirectWriter{ResponseWriter: w, path: req.URL.Path}
		handler.ServeHTTP(responsewriter.WrapForHTTP1Or2(d), req)
	})
}

type noRedirectWriter struct {
	http.ResponseWriter
	path       string
	suppressed bool
}

var _ responsewriter.UserProvidedDecorator = &noRedirectWriter{}

func (w *noRedirectWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *noRedirectWriter) WriteHeader(code int) {
	if code >= 300 && code < 400 {
		w.suppressed = true
		h := w.ResponseWriter.Header()
		h.Del("Location")
		h.Set("Content-Type", "application/json")
		h.Del("Content-Length")
		w.ResponseWriter.WriteHeader(http.StatusNotFound)
		status := apierrors.NewNotFound(schema.GroupResource{}, w.path).Status()
		status.Kind, status.APIVersion = "Status", "v1"
		body, err := json.Marshal(&status)
		if err == nil {
			_, _ = w.ResponseWriter.Write(append(body, '\n'))
		}
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *noRedirectWriter) Write(b []byte) (int, error) {
	if w.suppressed {
		// Drop the redirect's own body ("<a href=...>").
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}
