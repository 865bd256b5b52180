package credential

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
)

func webhookCredential(url string, caPEM []byte, timeout int32) *rotationv1alpha1.RotatingCredential {
	return &rotationv1alpha1.RotatingCredential{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "db", UID: "uid-1"},
		Spec: rotationv1alpha1.RotatingCredentialSpec{Minter: rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterWebhook,
			Webhook: &rotationv1alpha1.WebhookMinter{URL: url, CABundle: caPEM, TimeoutSeconds: &timeout}}},
	}
}

func serverCA(s *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

// A webhook's failure reaches the RotatingCredential's Degraded condition
// (read by whoever may read the object) as its class only: never the
// address rekey dialled, what a resolver answered, the peer's certificate
// or the body it sent. Otherwise a user allowed to write a webhook minter
// could use rekey to map what it can reach.
func TestWebhookFailureIsAClassNotAnAddress(t *testing.T) {
	t.Parallel()
	const bodySecret = "internal-body-the-user-must-not-see"
	ok := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/500":
			http.Error(w, bodySecret, http.StatusInternalServerError)
		case "/garbage":
			_, _ = w.Write([]byte(bodySecret + "{not json"))
		case "/huge":
			_, _ = w.Write([]byte(`{"data":{"password":"` + strings.Repeat("A", 2*maxWebhookBody) + `"}}`))
		case "/redirect":
			http.Redirect(w, r, "https://10.1.2.3:8443/elsewhere", http.StatusFound)
		case "/old-key":
			_ = json.NewEncoder(w).Encode(WebhookResponse{Data: map[string][]byte{"password.old": []byte("x")}})
		}
	}))
	t.Cleanup(ok.Close)
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := l.Addr().String()
	_ = l.Close()
	okHost := strings.TrimPrefix(ok.URL, "https://")

	for name, tc := range map[string]struct {
		url    string
		ca     []byte
		reason string
		class  string
	}{
		"connection refused": {"https://" + closedAddr + "/mint", nil, "WebhookUnreachable", "connection refused"},
		"unknown host":       {"https://no-such-host.invalid/mint", nil, "WebhookUnreachable", "host name did not resolve"},
		"untrusted TLS":      {ok.URL + "/500", nil, "WebhookTLSFailed", "TLS"},
		"non-2xx":            {ok.URL + "/500", serverCA(ok), "WebhookFailed", "HTTP 500"},
		"not JSON":           {ok.URL + "/garbage", serverCA(ok), "WebhookInvalidResponse", "not a JSON object"},
		"too large":          {ok.URL + "/huge", serverCA(ok), "WebhookInvalidResponse", "exceeds"},
		"redirect":           {ok.URL + "/redirect", serverCA(ok), "WebhookFailed", "redirect"},
		"reserved key":       {ok.URL + "/old-key", serverCA(ok), "WebhookInvalidResponse", ".old"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := WebhookMinter{}.Mint(context.Background(), webhookCredential(tc.url, tc.ca, 5), 1)
			var me *MintError
			if !errors.As(err, &me) {
				t.Fatalf("want a MintError, got %v", err)
			}
			msg := me.Error()
			if me.Reason != tc.reason || !strings.Contains(msg, tc.class) {
				t.Fatalf("want reason %s with %q, got %s", tc.reason, tc.class, msg)
			}
			for _, leak := range []string{closedAddr, okHost, "127.0.0.1", "10.1.2.3", "no-such-host", bodySecret, "dial tcp", "x509", "AAAA"} {
				if strings.Contains(msg, leak) {
					t.Fatalf("the message %q names %q", msg, leak)
				}
			}
			// Nothing underneath either: Degraded is written from the
			// message, but a caller may log or wrap the error chain.
			if errors.Unwrap(me.Err) != nil {
				t.Fatalf("the error wraps %v", errors.Unwrap(me.Err))
			}
		})
	}
}

// Every webhook call is bounded in time whatever the webhook does: accept
// and never answer, answer headers and then trickle the body, and with a
// caller that set no deadline. A hanging webhook gives back its worker.
func TestWebhookCallIsBounded(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hook := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/trickle" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"data":{`))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	// Cleanups run last first: the handlers are released, then the
	// server closed (Close waits for them).
	t.Cleanup(hook.Close)
	t.Cleanup(func() { close(release) })
	for _, path := range []string{"/hang", "/trickle"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			// A hang fails the test by the test binary's timeout.
			_, err := WebhookMinter{}.Mint(context.Background(), webhookCredential(hook.URL+path, serverCA(hook), 1), 1)
			var me *MintError
			if !errors.As(err, &me) || me.Reason != "WebhookTimeout" {
				t.Fatalf("want WebhookTimeout, got %v", err)
			}
		})
	}
}

// A stored spec that predates validation cannot lift the bound: the
// timeout is clamped to what validation accepts.
func TestWebhookTimeoutClamped(t *testing.T) {
	for in, want := range map[int32]time.Duration{0: time.Second, -5: time.Second, 7: 7 * time.Second, 3600: 30 * time.Second} {
		v := in
		if got := webhookTimeout(&rotationv1alpha1.WebhookMinter{TimeoutSeconds: &v}); got != want {
			t.Errorf("timeoutSeconds %d: got %v, want %v", in, got, want)
		}
	}
	if got := webhookTimeout(&rotationv1alpha1.WebhookMinter{}); got != defaultWebhookTTL {
		t.Errorf("no timeout: got %v, want %v", got, defaultWebhookTTL)
	}
}
