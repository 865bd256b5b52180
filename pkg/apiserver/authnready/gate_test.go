package authnready

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// fakeCA is a CA provider whose content the test sets, notifying its
// listeners as the ConfigMap controller does.
type fakeCA struct {
	mu        sync.Mutex
	content   []byte
	listeners []dynamiccertificates.Listener
}

func (f *fakeCA) Name() string { return "fake" }
func (f *fakeCA) CurrentCABundleContent() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.content
}
func (f *fakeCA) VerifyOptions() (x509.VerifyOptions, bool) { return x509.VerifyOptions{}, false }
func (f *fakeCA) AddListener(l dynamiccertificates.Listener) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listeners = append(f.listeners, l)
}
func (f *fakeCA) load(content string) {
	f.mu.Lock()
	f.content = []byte(content)
	ls := append([]dynamiccertificates.Listener(nil), f.listeners...)
	f.mu.Unlock()
	for _, l := range ls {
		l.Enqueue()
	}
}

func keysOf(keys ...string) Keys {
	return func(context.Context) (map[string]bool, error) {
		m := map[string]bool{}
		for _, k := range keys {
			m[k] = true
		}
		return m, nil
	}
}

var served = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })

func serve(g *Gate, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	g.WithHold(served).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func waitOpen(t *testing.T, g *Gate) {
	t.Helper()
	select {
	case <-g.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("the gate did not open")
	}
}

func TestHeldRequestIsServedOnceTheCAsLoad(t *testing.T) {
	client, front := &fakeCA{}, &fakeCA{}
	g := New([]Source{{client, "client-ca-file"}, {front, "requestheader-client-ca-file"}}, keysOf("client-ca-file", "requestheader-client-ca-file"), time.Minute, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go g.Run(ctx)

	done := make(chan int, 1)
	go func() { done <- serve(g, "/apis").Code }()
	front.load("front")
	// One of two loaded: the request stays held (a window, not a sleep
	// before a look: any answer inside it fails the test).
	select {
	case code := <-done:
		t.Fatalf("answered %d with the client CA not loaded", code)
	case <-time.After(200 * time.Millisecond):
	}
	if err := g.Check(nil); err == nil {
		t.Fatal("readyz check passes with the client CA not loaded")
	}
	client.load("client")
	select {
	case code := <-done:
		if code != http.StatusOK {
			t.Fatalf("answered %d once loaded, want 200", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held request was not served once the CAs loaded")
	}
	if err := g.Check(nil); err != nil {
		t.Fatalf("readyz check: %v", err)
	}
}

func TestKeyTheConfigMapLacksIsNotWaitedFor(t *testing.T) {
	// kube-apiserver without --client-ca-file publishes no client-ca-file:
	// that provider stays empty for good.
	client, front := &fakeCA{}, &fakeCA{}
	front.load("front")
	g := New([]Source{{client, "client-ca-file"}, {front, "requestheader-client-ca-file"}}, keysOf("requestheader-client-ca-file"), time.Minute, time.Minute)
	go g.Run(context.Background())
	waitOpen(t, g)
	if code := serve(g, "/apis").Code; code != http.StatusOK {
		t.Fatalf("answered %d, want 200", code)
	}
}

func TestPastTheHoldA503WithRetryAfter(t *testing.T) {
	g := New([]Source{{&fakeCA{}, "client-ca-file"}}, keysOf("client-ca-file"), time.Millisecond, time.Minute)
	rec := serve(g, "/apis/certificates.rekey.io/v1alpha1")
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("answered %d, want 503", rec.Code)
	}
	if rec.Header().Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After: client-go would not retry it")
	}
	var status metav1.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil || status.Reason != metav1.StatusReasonServiceUnavailable || status.Kind != "Status" {
		t.Fatalf("body %q is not a ServiceUnavailable Status (%v)", rec.Body.String(), err)
	}
}

func TestHealthChecksAreNotHeld(t *testing.T) {
	// A hold of a millisecond: a held request answers 503 at once.
	g := New([]Source{{&fakeCA{}, "client-ca-file"}}, keysOf("client-ca-file"), time.Millisecond, time.Hour)
	for _, p := range []string{"/healthz", "/livez", "/readyz", "/readyz/ping"} {
		if code := serve(g, p).Code; code != http.StatusOK {
			t.Errorf("%s: %d, want 200 at once", p, code)
		}
	}
	if code := serve(g, "/readyzzz").Code; code != http.StatusServiceUnavailable {
		t.Errorf("/readyzzz was not held: %d", code)
	}
}

func TestGivesUpAndServes(t *testing.T) {
	g := New([]Source{{&fakeCA{}, "client-ca-file"}}, keysOf("client-ca-file"), time.Hour, 50*time.Millisecond)
	go g.Run(context.Background())
	waitOpen(t, g)
}

func TestRetriesTheConfigMapRead(t *testing.T) {
	var calls atomic.Int32
	keys := func(context.Context) (map[string]bool, error) {
		if calls.Add(1) < 3 {
			return nil, errors.New("connection refused")
		}
		return map[string]bool{}, nil
	}
	g := New([]Source{{&fakeCA{}, "client-ca-file"}}, keys, time.Hour, time.Minute)
	go g.Run(context.Background())
	waitOpen(t, g)
	if calls.Load() < 3 {
		t.Fatalf("opened after %d reads", calls.Load())
	}
}

func TestNoSourcesIsOpen(t *testing.T) {
	g := New(nil, nil, time.Hour, time.Hour)
	if err := g.Check(nil); err != nil {
		t.Fatal(err)
	}
	if code := serve(g, "/apis").Code; code != http.StatusOK {
		t.Fatalf("answered %d", code)
	}
}
