package publicpaths

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func text(s string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, s) })
}

func TestMux(t *testing.T) {
	m := New()
	m.Handle("/revocation/authorize", text("webhook"))
	m.Handle("/crl/", text("crl"))
	m.Handle("/crl/special/", text("special"))
	m.Handle("/redirect", http.RedirectHandler("/elsewhere", http.StatusFound))
	h := m.Wrap(text("chain"))
	for path, want := range map[string]string{
		"/revocation/authorize":   "webhook",
		"/revocation/authorize/x": "chain",
		"/revocation/":            "chain",
		"/crl/ca":                 "crl",
		"/crl/ca/key":             "crl",
		"/crl/":                   "crl",
		"/crl":                    "chain", // no redirect to /crl/
		"/crl/special/x":          "special",
		"/apis":                   "chain",
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if got := rec.Body.String(); got != want || rec.Code != http.StatusOK {
			t.Errorf("%s: got %d %q, want 200 %q", path, rec.Code, got, want)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/redirect", nil))
	if rec.Code != http.StatusNotFound || rec.Header().Get("Location") != "" {
		t.Errorf("a public handler's redirect: got %d Location %q, want 404 without Location", rec.Code, rec.Header().Get("Location"))
	}
	// Registering again replaces.
	m.Handle("/crl/", text("crl2"))
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/crl/x", nil))
	if rec.Body.String() != "crl2" {
		t.Errorf("re-registered /crl/: got %q", rec.Body.String())
	}
	var nilMux *Mux
	if nilMux.Wrap(text("chain")) == nil || nilMux.Match("/crl/") != nil {
		t.Error("a nil Mux must pass everything on")
	}
}
