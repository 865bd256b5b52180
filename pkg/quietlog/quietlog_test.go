package quietlog

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// syncBuffer is klog's output in these tests (klog writes from its own
// flush goroutine too).
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// At -v=10 client-go logs every request and response body (rest.Request at
// V(8) and up) and headers and curl commands (the debugging round tripper
// at V(6) and up). Called with a quiet context, no client logs any of it:
// a Secret read, a Secret write and a TokenRequest carry credentials in
// their bodies and none of them shows in the log, while the caller's own
// messages up to MaxLevel still do, attributed to the caller's line.
func TestNoClientLogsABodyAtAnyVerbosity(t *testing.T) {
	const secretValue = "s3cr3t-value-that-must-never-be-logged"
	const token = "eyJ-token-that-must-never-be-logged"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/token") {
			_ = json.NewEncoder(w).Encode(&authenticationv1.TokenRequest{
				TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenRequest"},
				Status:   authenticationv1.TokenRequestStatus{Token: token}})
			return
		}
		_ = json.NewEncoder(w).Encode(&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}, Data: map[string][]byte{"password": []byte(secretValue)}})
	}))
	defer srv.Close()

	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	oldV, oldVmodule := fs.Lookup("v").Value.String(), fs.Lookup("vmodule").Value.String()
	out := &syncBuffer{}
	klog.LogToStderr(false)
	klog.SetOutput(out)
	t.Cleanup(func() {
		klog.Flush()
		_ = fs.Set("v", oldV)
		_ = fs.Set("vmodule", oldVmodule)
		klog.SetOutput(io.Discard)
		klog.LogToStderr(true)
	})
	if err := fs.Set("v", "10"); err != nil {
		t.Fatal(err)
	}

	calls := func(quiet bool) {
		// The client is made after the flags are set: client-go decides
		// at construction whether to wrap the transport for debugging.
		kube, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, BearerToken: "bearer-that-must-never-be-logged"})
		if err != nil {
			t.Fatal(err)
		}
		for _, ctx := range []context.Context{context.Background(), klog.NewContext(context.Background(), klog.Background().WithValues("caller", "test"))} {
			if quiet {
				ctx = Context(ctx)
				klog.FromContext(ctx).V(MaxLevel).Info("Still logged")
				klog.FromContext(ctx).V(MaxLevel + 1).Info("Never logged")
			}
			secrets := kube.CoreV1().Secrets("ns")
			if _, err := secrets.Get(ctx, "s", metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := secrets.Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"},
				Data: map[string][]byte{"password": []byte(secretValue)}}, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := kube.CoreV1().ServiceAccounts("ns").CreateToken(ctx, "sa", &authenticationv1.TokenRequest{}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		klog.Flush()
	}
	leaked := func(log string) []string {
		var found []string
		for _, v := range []string{secretValue, base64.StdEncoding.EncodeToString([]byte(secretValue)), token, "bearer-that-must-never-be-logged"} {
			if strings.Contains(log, v) {
				found = append(found, v)
			}
		}
		return found
	}

	// The test can see a leak: without the rule the bodies are logged.
	calls(false)
	if len(leaked(out.String())) == 0 {
		t.Fatalf("the test does not see client-go's body logging at -v=10; log:\n%.2000s", out.String())
	}

	// As component-base's logs.InitLogs leaves it in rekey-apiserver.
	klog.EnableContextualLogging(false)
	t.Cleanup(func() { klog.EnableContextualLogging(true) })
	before := len(out.String())
	calls(true)
	log := out.String()[before:]
	if found := leaked(log); len(found) > 0 {
		t.Fatalf("credentials in the log at -v=10: %q\n%.4000s", found, log)
	}
	if strings.Contains(log, "Never logged") || strings.Contains(log, "round_trippers.go") || strings.Contains(log, "Body") {
		t.Fatalf("a quiet context logged above V(%d):\n%.3000s", MaxLevel, log)
	}
	// (The second context's values were dropped by klog.NewContext while
	// contextual logging was off, before Context turned it on.)
	if strings.Count(log, "quietlog_test.go") != 2 || strings.Count(log, `"Still logged"`) != 2 {
		t.Fatalf("a quiet context lost the caller's messages, values or line:\n%.3000s", log)
	}
}
