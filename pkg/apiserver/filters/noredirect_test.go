package filters

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestWithoutRedirectsTurnsEveryRedirectInto404(t *testing.T) {
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		h := WithoutRedirects(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://evil.example.com/", code)
		}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof", nil))
		if rec.Code != http.StatusNotFound {
			t.Errorf("%d became %d, want 404", code, rec.Code)
		}
		if loc := rec.Header().Get("Location"); loc != "" {
			t.Errorf("Location header kept: %q", loc)
		}
		if strings.Contains(rec.Body.String(), "evil") {
			t.Errorf("redirect body leaked: %q", rec.Body.String())
		}
		var status metav1.Status
		if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil {
			t.Fatalf("body is not a Status: %v: %q", err, rec.Body.String())
		}
		if status.Kind != "Status" || status.Reason != metav1.StatusReasonNotFound || status.Code != http.StatusNotFound || !strings.Contains(status.Message, "/debug/pprof") {
			t.Errorf("status %+v", status)
		}
	}
}

func TestWithoutRedirectsPassesOtherResponses(t *testing.T) {
	h := WithoutRedirects(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("made"))
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/apis/x", nil))
	if rec.Code != http.StatusCreated || rec.Body.String() != "made" {
		t.Fatalf("got %d %q", rec.Code, rec.Body.String())
	}
	if _, ok := interface{}(WithoutRedirects(nil)).(http.Handler); !ok {
		t.Fatal("not a handler")
	}
}

func TestWithoutRedirectsKeepsFlusher(t *testing.T) {
	var flushable bool
	h := WithoutRedirects(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, flushable = w.(http.Flusher)
	}))
	// An HTTP/2 server's writer is a Flusher and a CloseNotifier.
	h.ServeHTTP(http2Writer{httptest.NewRecorder()}, httptest.NewRequest("GET", "/watch", nil))
	if !flushable {
		t.Fatal("watch streams need http.Flusher")
	}
}

type http2Writer struct{ *httptest.ResponseRecorder }

func (http2Writer) CloseNotify() <-chan bool { return make(chan bool) } //nolint:staticcheck // the interface the server uses

func TestWithoutRedirectsNeverAnswersNotModified(t *testing.T) {
	h := WithoutRedirects(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") == `"etag"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", `"etag"`)
		_, _ = w.Write([]byte("discovery"))
	}))
	req := httptest.NewRequest("GET", "/apis", nil)
	req.Header.Set("If-None-Match", `"etag"`)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Body.String() != "discovery" {
		t.Fatalf("got %d %q, want 200 with the document", rec.Code, rec.Body.String())
	}
}
