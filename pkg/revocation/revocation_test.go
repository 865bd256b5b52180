package revocation

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/tools/cache"

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
	if !ok || e.Reason != certv1alpha1.RevocationReasonKeyCompromise || e.CAName != "users" || !e.RevocationTime.Equal(revokedAt) {
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
		"GET":           {http.MethodGet, "", http.StatusMethodNotAllowed, "POST"},
		"not JSON":      {http.MethodPost, "{", http.StatusBadRequest, "not a SubjectAccessReview"},
		"wrong version": {http.MethodPost, `{"apiVersion":"authorization.k8s.io/v1beta1","kind":"SubjectAccessReview"}`, http.StatusBadRequest, "subjectAccessReviewVersion: v1"},
		"too large":     {http.MethodPost, `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","x":"` + strings.Repeat("a", MaxRequestBytes) + `"}`, http.StatusRequestEntityTooLarge, "larger than"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, Path, strings.NewReader(c.body)))
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.text) {
			t.Errorf("%s: %d %q, want %d containing %q", name, rec.Code, rec.Body, c.code, c.text)
		}
	}
	// Too large without Content-Length (chunked): read up to the cap only.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(strings.Repeat(" ", MaxRequestBytes+10)))
	req.ContentLength = -1
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked too large: %d", rec.Code)
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
	// scanner, the apiVersion, kind and credential-id strings and their
	// slice): reading the body, the lookup and the answer allocate nothing.
	if allocs > 13 {
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

func BenchmarkWebhook(b *testing.B) {
	set := NewSet()
	for i := 0; i < 100000; i++ {
		var s [32]byte
		s[0], s[1], s[2] = byte(i), byte(i>>8), byte(i>>16)
		set.entries[s] = &Entry{SHA256: s, Reason: certv1alpha1.RevocationReasonKeyCompromise, RevocationTime: revokedAt}
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
