package revocation

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
)

var revokedAt = time.Date(2026, 11, 24, 19, 0, 0, 0, time.UTC)

func sum(s string) [32]byte { return sha256.Sum256([]byte(s)) }

func revocationOf(s [32]byte, reason certv1alpha1.RevocationReason) *certv1alpha1.Revocation {
	h := Hex(s)
	return &certv1alpha1.Revocation{
		ObjectMeta: metav1.ObjectMeta{Name: h},
		Spec:       certv1alpha1.RevocationSpec{CertificateSHA256: h, Reason: reason},
		Status: certv1alpha1.RevocationStatus{
			CertificateSHA256: h, SerialNumber: "01", SignerName: "example.com/users", CAName: "users",
			CAKeyID: "k1", RevocationTime: metav1.NewTime(revokedAt), NotAfter: metav1.NewTime(revokedAt.Add(time.Hour)),
		},
	}
}

// setWith returns a synced set fed by a real informer over a fake
// clientset holding objs.
func setWith(t *testing.T, objs ...*certv1alpha1.Revocation) (*Set, *fake.Clientset) {
	t.Helper()
	client := fake.NewSimpleClientset()
	for _, o := range objs {
		if _, err := client.CertificatesV1alpha1().Revocations().Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	set := NewSet()
	if err := set.Watch(factory.Certificates().V1alpha1().Revocations().Informer()); err != nil {
		t.Fatal(err)
	}
	if set.HasSynced() {
		t.Fatal("synced before the informer started")
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory.Start(ctx.Done())
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if !set.WaitForSync(wctx) {
		t.Fatal("set did not sync")
	}
	return set, client
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestSet(t *testing.T) {
	a, b := sum("a"), sum("b")
	set, client := setWith(t, revocationOf(a, certv1alpha1.RevocationReasonKeyCompromise))
	changes := make(chan struct{}, 1)
	set.Notify(changes)
	e, ok := set.Lookup(a)
	if !ok || e.Reason != certv1alpha1.RevocationReasonKeyCompromise || !e.NotAfter.Equal(revokedAt.Add(time.Hour)) || !e.RevocationTime.Equal(revokedAt) {
		t.Fatalf("Lookup(a) = %+v, %v", e, ok)
	}
	if _, ok := set.LookupCredentialID("X509SHA256=" + strings.ToUpper(Hex(a))); !ok {
		t.Error("an upper-case credential-id must match")
	}
	if _, ok := set.Lookup(b); ok {
		t.Error("b is not revoked")
	}
	// A Revocation without a reason counts as Unspecified; one whose status
	// was not filled is keyed by its name.
	r := revocationOf(b, "")
	r.Status.CertificateSHA256 = ""
	if _, err := client.CertificatesV1alpha1().Revocations().Create(context.Background(), r, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b revoked", func() bool { _, ok := set.Lookup(b); return ok })
	if e, _ := set.Lookup(b); e.Reason != certv1alpha1.RevocationReasonUnspecified {
		t.Errorf("reason of b: %q", e.Reason)
	}
	select {
	case <-changes:
	case <-time.After(10 * time.Second):
		t.Error("no change notified")
	}
	if set.Len() != 2 {
		t.Errorf("Len = %d", set.Len())
	}
	n := 0
	set.Range(func(Entry) bool { n++; return true })
	if n != 2 {
		t.Errorf("Range saw %d", n)
	}
	// The fake clientset deletes although the real server lets only rekey.
	if err := client.CertificatesV1alpha1().Revocations().(interface {
		Delete(context.Context, string, metav1.DeleteOptions) error
	}).Delete(context.Background(), Hex(a), metav1.DeleteOptions{}); err == nil {
		eventually(t, "a dropped", func() bool { _, ok := set.Lookup(a); return !ok })
	}
}

func TestParseCredentialID(t *testing.T) {
	a := sum("a")
	for id, want := range map[string]bool{
		"X509SHA256=" + Hex(a):                  true,
		"X509SHA256=" + strings.ToUpper(Hex(a)): true,
		"x509sha256=" + Hex(a):                  false,
		"X509SHA256=" + Hex(a)[:63]:             false,
		"X509SHA256=" + Hex(a) + "0":            false,
		"X509SHA256=" + Hex(a)[:63] + "g":       false,
		"JTI=abc":                               false,
		"":                                      false,
	} {
		got, ok := ParseCredentialID(id)
		if ok != want || ok && got != a {
			t.Errorf("ParseCredentialID(%q) = %x, %v; want ok=%v", id, got, ok, want)
		}
	}
}

func sar(extra map[string]authorizationv1.ExtraValue) []byte {
	b, _ := json.Marshal(&authorizationv1.SubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"},
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "alice", Groups: []string{"dev", "system:authenticated"}, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "namespaces"},
		},
	})
	return b
}

func post(h http.Handler, body []byte) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	return rec
}

func decodeStatus(t *testing.T, rec *httptest.ResponseRecorder) authorizationv1.SubjectAccessReviewStatus {
	t.Helper()
	if rec.Code != http.StatusOK {
		t.Fatalf("code %d: %s", rec.Code, rec.Body)
	}
	var out authorizationv1.SubjectAccessReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("answer %q: %v", rec.Body, err)
	}
	if out.APIVersion != "authorization.k8s.io/v1" || out.Kind != "SubjectAccessReview" {
		t.Errorf("answer's type: %s %s", out.APIVersion, out.Kind)
	}
	return out.Status
}

func TestWebhook(t *testing.T) {
	a, b := sum("a"), sum("b")
	set, _ := setWith(t, revocationOf(a, certv1alpha1.RevocationReasonKeyCompromise))
	h := NewWebhook(set)

	// Revoked: Deny with the reason rekey-agent looks for.
	st := decodeStatus(t, post(h, sar(map[string]authorizationv1.ExtraValue{
		"other":         {"x"},
		CredentialIDKey: {"X509SHA256=" + Hex(a)},
	})))
	want := "rekey: certificate X509SHA256=" + Hex(a) + " was revoked (KeyCompromise) at 2026-11-24T19:00:00Z"
	if st.Allowed || !st.Denied || st.Reason != want {
		t.Errorf("revoked: %+v, want denied with reason %q", st, want)
	}
	// Any revoked value among several denies.
	st = decodeStatus(t, post(h, sar(map[string]authorizationv1.ExtraValue{CredentialIDKey: {"JTI=1", "X509SHA256=" + Hex(a)}})))
	if !st.Denied {
		t.Errorf("second credential-id revoked: %+v", st)
	}
	// Not revoked, a token, no extra: NoOpinion, never Allow.
	for name, extra := range map[string]map[string]authorizationv1.ExtraValue{
		"other cert": {CredentialIDKey: {"X509SHA256=" + Hex(b)}},
		"token":      {CredentialIDKey: {"JTI=" + Hex(a)}},
		"none":       nil,
		"malformed":  {CredentialIDKey: {"X509SHA256=zz"}},
	} {
		st := decodeStatus(t, post(h, sar(extra)))
		if st.Allowed || st.Denied || st.Reason != "" {
			t.Errorf("%s: %+v, want NoOpinion", name, st)
		}
	}

	// Clear errors.
	for name, c := range map[string]struct {
		method string
		body   string
		code   int
		text   string
	}{
		"GET":            {http.MethodGet, "", http.StatusMethodNotAllowed, "POST"},
		"not JSON":       {http.MethodPost, "{", http.StatusBadRequest, "not a SubjectAccessReview"},
		"wrong version":  {http.MethodPost, `{"apiVersion":"authorization.k8s.io/v1beta1","kind":"SubjectAccessReview"}`, http.StatusBadRequest, "subjectAccessReviewVersion: v1"},
		"large, broken":  {http.MethodPost, `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","x":"` + strings.Repeat("a", MaxRequestBytes) + `"`, http.StatusBadRequest, "not a SubjectAccessReview"},
		"large, v1beta1": {http.MethodPost, `{"apiVersion":"authorization.k8s.io/v1beta1","kind":"SubjectAccessReview","x":"` + strings.Repeat("a", MaxRequestBytes) + `"}`, http.StatusBadRequest, "subjectAccessReviewVersion: v1"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, Path, strings.NewReader(c.body)))
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.text) {
			t.Errorf("%s: %d %q, want %d containing %q", name, rec.Code, rec.Body, c.code, c.text)
		}
	}
	// Too large, with or without Content-Length (chunked): Deny, not an
	// HTTP error (kube-apiserver would apply its failurePolicy), reading
	// up to the cap only.
	for _, length := range []int64{MaxReviewBytes + 10, -1} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(strings.Repeat(" ", MaxReviewBytes+10)))
		req.ContentLength = length
		h.ServeHTTP(rec, req)
		want := "rekey: the SubjectAccessReview is larger than 8388608 bytes; a request that cannot be checked is refused"
		if st := decodeStatus(t, rec); rec.Code != http.StatusOK || !st.Denied || st.Reason != want {
			t.Errorf("too large, Content-Length %d: %d %+v, want 200 denied %q", length, rec.Code, st, want)
		}
	}
	// A large review (past what is decoded at once) is decided all the
	// same, whichever order its fields come in; chunked too.
	padding := `"resourceAttributes":{"verb":"list","labelSelector":{"requirements":[` + strings.Repeat(`{"key":"k","operator":"NotIn","values":["v"]},`, 3000) + `{"key":"k","operator":"Exists"}]}}`
	for name, body := range map[string]string{
		"extra last":  `{"kind":"SubjectAccessReview","spec":{` + padding + `,"extra":{"authentication.kubernetes.io/credential-id":["X509SHA256=` + Hex(a) + `"]}},"apiVersion":"authorization.k8s.io/v1"}`,
		"extra first": `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"extra":{"authentication.kubernetes.io/credential-id":["X509SHA256=` + Hex(a) + `"]},` + padding + `}}`,
	} {
		for _, length := range []int64{int64(len(body)), -1} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(body))
			req.ContentLength = length
			h.ServeHTTP(rec, req)
			if st := decodeStatus(t, rec); !st.Denied {
				t.Errorf("large review (%d bytes), %s, Content-Length %d: %+v, want denied", len(body), name, length, st)
			}
		}
	}
	big := `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"extra":{"authentication.kubernetes.io/credential-id":["X509SHA256=` + Hex(b) + `"]},` + padding + `}}`
	if st := decodeStatus(t, post(h, []byte(big))); st.Denied || st.Allowed {
		t.Errorf("large review of a certificate not revoked: %+v, want NoOpinion", st)
	}
}

func TestWebhookBeforeSync(t *testing.T) {
	h := NewWebhook(NewSet())
	rec := post(h, sar(nil))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("before sync: %d Retry-After %q, want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
}

func TestWebhookAllocations(t *testing.T) {
	set, _ := setWith(t, revocationOf(sum("a"), certv1alpha1.RevocationReasonKeyCompromise))
	h := NewWebhook(set)
	body := sar(map[string]authorizationv1.ExtraValue{CredentialIDKey: {"X509SHA256=" + Hex(sum("b"))}})
	req := httptest.NewRequest(http.MethodPost, Path, nil)
	rd := bytes.NewReader(body)
	w := &discard{h: http.Header{}}
	allocs := testing.AllocsPerRun(200, func() {
		rd.Reset(body)
		req.Body = noClose{rd}
		h.ServeHTTP(w, req)
	})
	// Only the decoding's (the struct decoded into, the decoder's state and
	// scanner, the apiVersion, kind and credential-id strings, the extra
	// map, its key and the value's slice): reading the body, the lookup
	// and the answer allocate nothing.
	if allocs > 19 {
		t.Errorf("%v allocations per NoOpinion decision", allocs)
	}
	t.Logf("%v allocations per NoOpinion decision", allocs)
}

type noClose struct{ *bytes.Reader }

func (noClose) Close() error { return nil }

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// The read and write deadlines, as a server's connection has them (a
// ResponseWriter without them makes ResponseController allocate its
// ErrNotSupported).
func (d *discard) SetReadDeadline(time.Time) error  { return nil }
func (d *discard) SetWriteDeadline(time.Time) error { return nil }

func BenchmarkWebhook(b *testing.B) {
	set := NewSet()
	for i := 0; i < 100000; i++ {
		var s [32]byte
		s[0], s[1], s[2] = byte(i), byte(i>>8), byte(i>>16)
		set.entries[s] = pack(&Entry{SHA256: s, Reason: certv1alpha1.RevocationReasonKeyCompromise, RevocationTime: revokedAt})
	}
	f := func() bool { return true }
	set.synced.Store(&f)
	h := NewWebhook(set)
	body := sar(map[string]authorizationv1.ExtraValue{CredentialIDKey: {"X509SHA256=" + Hex(sum("b"))}})
	req := httptest.NewRequest(http.MethodPost, Path, nil)
	rd := bytes.NewReader(body)
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		rd.Reset(body)
		req.Body = noClose{rd}
		h.ServeHTTP(w, req)
	}
}

type fakeAuthn struct{ extra map[string][]string }

func (f fakeAuthn) AuthenticateRequest(*http.Request) (*authenticator.Response, bool, error) {
	return &authenticator.Response{User: &user.DefaultInfo{Name: "alice", Extra: f.extra}}, true, nil
}

func TestWithAuthenticator(t *testing.T) {
	a, b := sum("a"), sum("b")
	set, _ := setWith(t, revocationOf(a, certv1alpha1.RevocationReasonSuperseded))
	req := httptest.NewRequest(http.MethodGet, "/apis", nil)
	_, ok, err := WithAuthenticator(set, fakeAuthn{map[string][]string{CredentialIDKey: {"X509SHA256=" + Hex(a)}}}, time.Second).AuthenticateRequest(req)
	if ok || err == nil || !strings.Contains(err.Error(), "X509SHA256="+Hex(a)+" was revoked (Superseded)") {
		t.Errorf("revoked: ok=%v err=%v, want refused", ok, err)
	}
	for name, extra := range map[string]map[string][]string{
		"other": {CredentialIDKey: {"X509SHA256=" + Hex(b)}},
		"token": {CredentialIDKey: {"JTI=x"}},
		"none":  nil,
	} {
		resp, ok, err := WithAuthenticator(set, fakeAuthn{extra}, time.Second).AuthenticateRequest(req)
		if !ok || err != nil || resp.User.GetName() != "alice" {
			t.Errorf("%s: ok=%v err=%v", name, ok, err)
		}
	}
	// Not synced: a certificate's request waits for the hold, then goes on
	// (logged); a token's does not wait.
	unsynced := NewSet()
	start := time.Now()
	if _, ok, _ := WithAuthenticator(unsynced, fakeAuthn{map[string][]string{CredentialIDKey: {"X509SHA256=" + Hex(a)}}}, 200*time.Millisecond).AuthenticateRequest(req); !ok {
		t.Error("unsynced: refused")
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Errorf("unsynced: went on after %v, before the hold", waited)
	}
	start = time.Now()
	if _, ok, _ := WithAuthenticator(unsynced, fakeAuthn{map[string][]string{CredentialIDKey: {"JTI=x"}}}, time.Hour).AuthenticateRequest(req); !ok || time.Since(start) > time.Second {
		t.Error("a token must not wait for the set")
	}
	// Errors and failures of the inner authenticator pass through.
	_, ok, err = WithAuthenticator(set, authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
		return nil, false, errors.New("bad")
	}), time.Second).AuthenticateRequest(req)
	if ok || err == nil || err.Error() != "bad" {
		t.Errorf("inner error: ok=%v err=%v", ok, err)
	}
}

// Large reviews are read a few at a time (their memory bounded whoever
// sends them); one that finds no slot before its deadline is denied, not
// failed (an HTTP error would let kube-apiserver's failurePolicy decide).
func TestWebhookLargeReviewsBounded(t *testing.T) {
	notRevoked := sum("not revoked, large")
	set, _ := setWith(t)
	h := NewWebhook(set)
	padding := `"resourceAttributes":{"verb":"list","labelSelector":{"requirements":[` + strings.Repeat(`{"key":"k","operator":"NotIn","values":["v"]},`, 3000) + `{"key":"k","operator":"Exists"}]}}`
	body := `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{` + padding + `,"extra":{"authentication.kubernetes.io/credential-id":["X509SHA256=` + Hex(notRevoked) + `"]}}}`
	if len(body) <= MaxRequestBytes {
		t.Fatalf("the review is %d bytes, not past the fast path", len(body))
	}
	for range largeSlots {
		large <- struct{}{}
	}
	freed := false
	free := func() {
		if !freed {
			for range largeSlots {
				<-large
			}
			freed = true
		}
	}
	t.Cleanup(free)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, strings.NewReader(body)).WithContext(ctx))
	if st := decodeStatus(t, rec); rec.Code != http.StatusOK || !st.Denied || !strings.Contains(st.Reason, "cannot be checked") {
		t.Errorf("large review with every slot taken: %d %+v, want 200 denied", rec.Code, st)
	}
	// A small one does not wait for a slot.
	if st := decodeStatus(t, post(h, sar(map[string]authorizationv1.ExtraValue{CredentialIDKey: {CredentialIDPrefix + Hex(notRevoked)}}))); st.Denied {
		t.Errorf("small review with every large slot taken: %+v, want NoOpinion", st)
	}
	free()
	if st := decodeStatus(t, post(h, []byte(body))); st.Denied || st.Allowed {
		t.Errorf("large review with slots free: %+v, want NoOpinion", st)
	}
	if len(large) != 0 {
		t.Errorf("%d large slots still taken after the requests", len(large))
	}
}

// The webhook's write deadline is an HTTP/1 connection's: it must not
// outlive the answer, or the next request on the kept-alive connection
// (any the server answers there) fails once it has passed. net/http takes
// it off after each response (the webhook relies on that).
func TestWebhookWriteDeadlineDoesNotOutliveTheAnswer(t *testing.T) {
	old := writeTimeout
	writeTimeout = 100 * time.Millisecond
	t.Cleanup(func() { writeTimeout = old })
	set, _ := setWith(t)
	mux := http.NewServeMux()
	mux.Handle(Path, NewWebhook(set))
	mux.HandleFunc("/other", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, `{"allowed":false}`) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	// One connection, by hand: a client would retry on a new one.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	br := bufio.NewReader(conn)
	body := sar(map[string]authorizationv1.ExtraValue{CredentialIDKey: {CredentialIDPrefix + Hex(sum("x"))}})
	for i, path := range []string{Path, "/other"} {
		if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: rekey\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d on the kept-alive connection: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"allowed":false`)) {
			t.Fatalf("request %d: %d %q %v", i, resp.StatusCode, b, err)
		}
		// Past the first answer's write deadline.
		time.Sleep(3 * writeTimeout)
	}
}

// The holder of a revoked certificate chooses how often rekey refuses it:
// the refusal is logged at Info once per certificate per interval (the
// others at V(4)), counted every time.
func TestWithAuthenticatorLogsRefusalsOncePerInterval(t *testing.T) {
	a, b := sum("a"), sum("b")
	set, _ := setWith(t, revocationOf(a, certv1alpha1.RevocationReasonSuperseded), revocationOf(b, certv1alpha1.RevocationReasonSuperseded))
	now := time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)
	authn := func(sum [32]byte) authenticator.Request {
		return fakeAuthn{map[string][]string{CredentialIDKey: {CredentialIDPrefix + Hex(sum)}}}
	}
	refusals := newRefusalLog(time.Minute, func() time.Time { return now })
	var logged []string
	logger := funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{Verbosity: 0})
	req := httptest.NewRequest(http.MethodGet, "/apis", nil).WithContext(klog.NewContext(context.Background(), logger))
	before, err := testutil.GetCounterMetricValue(authnRefused)
	if err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct {
		sum     [32]byte
		advance time.Duration
	}{{a, 0}, {a, time.Second}, {b, 0}, {a, 30 * time.Second}, {b, 0}, {a, 30 * time.Second}} {
		now = now.Add(step.advance)
		if _, ok, err := withAuthenticator(set, authn(step.sum), time.Second, refusals).AuthenticateRequest(req); ok || err == nil {
			t.Fatalf("request %d: not refused", i)
		}
	}
	// a at 0s and 61s, b at 1s: a at 1s and 31s and b at 31s are within
	// their minute.
	if len(logged) != 3 {
		t.Errorf("%d refusals logged at Info, want 3: %q", len(logged), logged)
	}
	after, _ := testutil.GetCounterMetricValue(authnRefused)
	if after-before != 6 {
		t.Errorf("refusals counted: %v, want 6", after-before)
	}
}

// The certificates remembered are bounded: past refusalLogSize a new one
// is not logged at Info until older ones have aged out.
func TestRefusalLogBounded(t *testing.T) {
	now := time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)
	l := newRefusalLog(time.Minute, func() time.Time { return now })
	for i := range refusalLogSize {
		if !l.first(benchSHA256(i)) {
			t.Fatalf("certificate %d not logged", i)
		}
	}
	if l.first(benchSHA256(refusalLogSize)) {
		t.Error("logged past the bound")
	}
	now = now.Add(time.Minute)
	if !l.first(benchSHA256(refusalLogSize)) || len(l.last) != 1 {
		t.Errorf("after the interval: not logged, or %d remembered", len(l.last))
	}
}
