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

// Outside the generic chain's in-flight limit, each pattern serves at most
// its budget at once (429 with Retry-After beyond), apart from the others.
func TestMaxInFlight(t *testing.T) {
	m := New()
	m.SetMaxInFlight(2)
	started, release := make(chan struct{}), make(chan struct{})
	m.Handle("/revocation/authorize", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		started <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "webhook")
	}))
	m.Handle("/crl/", text("crl"))
	h := m.Wrap(text("chain"))
	done := make(chan int, 2)
	for range 2 {
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/revocation/authorize", nil))
			done <- rec.Code
		}()
		<-started
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/revocation/authorize", nil))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("third at once: %d Retry-After %q, want 429 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	for path, want := range map[string]string{"/crl/ca": "crl", "/apis": "chain"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK || rec.Body.String() != want {
			t.Errorf("%s with the webhook's budget spent: %d %q", path, rec.Code, rec.Body.String())
		}
	}
	close(release)
	for range 2 {
		if code := <-done; code != http.StatusOK {
			t.Errorf("a request within the budget: %d", code)
		}
	}
	go func() { <-started }()
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/revocation/authorize", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("after the others ended: %d, want 200", rec.Code)
	}
}
