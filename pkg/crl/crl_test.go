package crl

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	"rekey.io/rekey/pkg/pki"
)

// fakeKeys is a CA "ca" with a current key k2 and a previous key k1.
type fakeKeys struct {
	mu       sync.Mutex
	cas      map[string][2]*authority.Authority // current, previous
	keyLoads int
}

func newFakeKeys(t *testing.T) *fakeKeys {
	t.Helper()
	k := &fakeKeys{cas: map[string][2]*authority.Authority{}}
	cur, prev := newCA(t, "ca", "k2"), newCA(t, "ca", "k1")
	k.cas["ca"] = [2]*authority.Authority{cur, prev}
	return k
}

func newCA(t *testing.T, name, keyID string) *authority.Authority {
	t.Helper()
	kp, err := pki.NewCA(name+" "+keyID, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &authority.Authority{Name: name, KeyID: keyID, Cert: kp.Cert, Signer: kp.Key}
}

func (k *fakeKeys) KeyIDs(ca string) (string, string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	a, ok := k.cas[ca]
	if !ok {
		return "", "", fmt.Errorf("CertificateAuthority %q: %w", ca, authority.ErrNoSuchKey)
	}
	prev := ""
	if a[1] != nil {
		prev = a[1].KeyID
	}
	return a[0].KeyID, prev, nil
}

func (k *fakeKeys) KeyByID(_ context.Context, ca, keyID string) (*authority.Authority, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keyLoads++
	for _, a := range k.cas[ca] {
		if a != nil && a.KeyID == keyID {
			return a, nil
		}
	}
	return nil, fmt.Errorf("key %s: %w", keyID, authority.ErrNoSuchKey)
}

func (k *fakeKeys) get(ca string, i int) *authority.Authority {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cas[ca][i]
}

func revocation(ca, keyID, serial string, reason certv1alpha1.RevocationReason, revoked, notAfter time.Time) *certv1alpha1.Revocation {
	return &certv1alpha1.Revocation{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%064s", serial)},
		Spec:       certv1alpha1.RevocationSpec{SerialNumber: serial, Reason: reason},
		Status: certv1alpha1.RevocationStatus{
			SerialNumber: serial, CAName: ca, CAKeyID: keyID,
			RevocationTime: metav1.NewTime(revoked), NotAfter: metav1.NewTime(notAfter),
		},
	}
}

type harness struct {
	m      *Manager
	keys   *fakeKeys
	clock  *clocktesting.FakeClock
	client *fake.Clientset
	ctx    context.Context
}

// start runs a Manager on a fake clientset holding objs; run also starts
// its worker.
func start(t *testing.T, run bool, objs ...*certv1alpha1.Revocation) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	client := fake.NewSimpleClientset()
	for _, o := range objs {
		if _, err := client.CertificatesV1alpha1().Revocations().Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	keys := newFakeKeys(t)
	m, err := New(Config{Keys: keys, Revocations: factory.Certificates().V1alpha1().Revocations().Informer(), Validity: time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), m.HasSynced) {
		t.Fatal("informer did not sync")
	}
	var wg sync.WaitGroup
	if run {
		wg.Add(1)
		go func() { defer wg.Done(); m.Run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait(); factory.Shutdown() })
	return &harness{m: m, keys: keys, clock: clk, client: client, ctx: ctx}
}

func parse(t *testing.T, crl *CRL, ca *x509.Certificate) *x509.RevocationList {
	t.Helper()
	rl, err := x509.ParseRevocationList(crl.DER)
	if err != nil {
		t.Fatalf("CRL does not parse: %v", err)
	}
	if err := rl.CheckSignatureFrom(ca); err != nil {
		t.Fatalf("CRL does not verify against its CA: %v", err)
	}
	return rl
}

var oidCRLReason = asn1.ObjectIdentifier{2, 5, 29, 21}

func TestCRLListsTheKeysUnexpiredRevocationsWithReasons(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	later, past := now.Add(24*time.Hour), now.Add(-time.Minute)
	revoked := now.Add(-time.Hour)
	var objs []*certv1alpha1.Revocation
	want := map[string]int{}
	for i, reason := range []certv1alpha1.RevocationReason{"", "Unspecified", "KeyCompromise", "CACompromise", "AffiliationChanged", "Superseded", "CessationOfOperation", "PrivilegeWithdrawn", "AACompromise"} {
		serial := fmt.Sprintf("a%02x", i)
		objs = append(objs, revocation("ca", "k2", serial, reason, revoked, later))
		want[serial] = map[certv1alpha1.RevocationReason]int{"": 0, "Unspecified": 0, "KeyCompromise": 1, "CACompromise": 2, "AffiliationChanged": 3, "Superseded": 4, "CessationOfOperation": 5, "PrivilegeWithdrawn": 9, "AACompromise": 10}[reason]
	}
	objs = append(objs,
		revocation("ca", "k2", "e1", "KeyCompromise", revoked, past),  // expired
		revocation("ca", "k1", "b1", "Superseded", revoked, later),    // the previous key's
		revocation("other", "k2", "c1", "Superseded", revoked, later)) // another CA's
	h := start(t, false, objs...)

	crl, err := h.m.Get(h.ctx, "ca", "k2")
	if err != nil {
		t.Fatal(err)
	}
	rl := parse(t, crl, h.keys.get("ca", 0).Cert)
	if got := len(rl.RevokedCertificateEntries); got != len(want) || crl.Entries != len(want) {
		t.Fatalf("%d entries (%d counted), want %d", got, crl.Entries, len(want))
	}
	for _, e := range rl.RevokedCertificateEntries {
		serial := fmt.Sprintf("%x", e.SerialNumber)
		code, ok := want[serial]
		if !ok {
			t.Fatalf("serial %s listed, not one of the key's unexpired revocations", serial)
		}
		if e.ReasonCode != code {
			t.Errorf("serial %s: reason %d, want %d", serial, e.ReasonCode, code)
		}
		hasExt := false
		for _, x := range e.Extensions {
			hasExt = hasExt || x.Id.Equal(oidCRLReason)
		}
		if hasExt != (code != 0) {
			t.Errorf("serial %s: reason code extension present %v, want %v (none for unspecified, RFC 5280 5.3.1)", serial, hasExt, code != 0)
		}
		if !e.RevocationTime.Equal(revoked) {
			t.Errorf("serial %s: revocation time %s, want %s", serial, e.RevocationTime, revoked)
		}
	}
	if rl.Number.Cmp(big.NewInt(now.UnixMilli())) != 0 {
		t.Errorf("CRL number %s, want the issue time in ms %d", rl.Number, now.UnixMilli())
	}
	if !rl.ThisUpdate.Equal(now.Add(-Backdate)) || !rl.NextUpdate.Equal(now.Add(time.Hour)) {
		t.Errorf("thisUpdate %s nextUpdate %s, want %s and %s", rl.ThisUpdate, rl.NextUpdate, now.Add(-Backdate), now.Add(time.Hour))
	}

	// The previous key's CRL: signed by it, its revocation alone.
	prev, err := h.m.Get(h.ctx, "ca", "k1")
	if err != nil {
		t.Fatal(err)
	}
	rl = parse(t, prev, h.keys.get("ca", 1).Cert)
	if len(rl.RevokedCertificateEntries) != 1 || rl.RevokedCertificateEntries[0].SerialNumber.Cmp(big.NewInt(0xb1)) != 0 {
		t.Fatalf("previous key's CRL lists %v, want serial b1", rl.RevokedCertificateEntries)
	}
	if rl.Number.Cmp(crl.Number) <= 0 {
		t.Errorf("a CRL issued in the same millisecond has number %s, not above %s", rl.Number, crl.Number)
	}

	// Current is the current key's.
	cur, err := h.m.Current(h.ctx, "ca")
	if err != nil || cur != crl {
		t.Fatalf("Current: %v, %v; want the cached CRL of k2", cur, err)
	}
	for _, tc := range []struct{ ca, key string }{{"ca", "k3"}, {"nope", "k2"}, {"ca", ""}} {
		if _, err := h.m.Get(h.ctx, tc.ca, tc.key); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q, %q): %v, want ErrNotFound", tc.ca, tc.key, err)
		}
	}
	if _, err := h.m.Current(h.ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Current of an unknown CA: %v, want ErrNotFound", err)
	}
}

func TestParseSerial(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "f": 15, "0f": 15, "1ab": 0x1ab, "DEAD": 0xdead} {
		if got, ok := parseSerial(in); !ok || got.Int64() != want {
			t.Errorf("parseSerial(%q) = %v, %v; want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "-1", "0x1", "zz", "1 2"} {
		if got, ok := parseSerial(in); ok {
			t.Errorf("parseSerial(%q) = %v, want refused", in, got)
		}
	}
}

func TestCRLNumbersIncreaseStrictly(t *testing.T) {
	h := start(t, false)
	var last *big.Int
	for i := 0; i < 5; i++ {
		// The same millisecond, then a clock stepped back.
		if i == 3 {
			h.clock.SetTime(h.clock.Now().Add(-time.Second))
		}
		n := h.m.nextNumber(h.clock.Now())
		if last != nil && n.Cmp(last) <= 0 {
			t.Fatalf("number %s after %s", n, last)
		}
		last = n
	}
	h.clock.Step(time.Hour)
	if n := h.m.nextNumber(h.clock.Now()); n.Int64() != h.clock.Now().UnixMilli() {
		t.Fatalf("number %s once the clock is past the last one, want the time in ms %d", n, h.clock.Now().UnixMilli())
	}
}

// eventually polls cond (the worker runs on its own goroutine).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func cached(h *harness, k key) *CRL {
	h.m.mu.Lock()
	e := h.m.entries[k]
	h.m.mu.Unlock()
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.crl
}

func TestCRLReissuedOnChangeAndAtHalfValidity(t *testing.T) {
	h := start(t, true)
	notified := make(chan string, 100)
	h.m.Subscribe(func(ca string) { notified <- ca })
	first, err := h.m.Get(h.ctx, "ca", "k2")
	if err != nil {
		t.Fatal(err)
	}
	if first.Entries != 0 {
		t.Fatalf("%d entries, want none", first.Entries)
	}
	<-notified

	// A revocation: issued again once the debounce has passed, not before.
	now := h.clock.Now()
	if _, err := h.client.CertificatesV1alpha1().Revocations().Create(h.ctx, revocation("ca", "k2", "f00d", "KeyCompromise", now, now.Add(time.Hour)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The fake clock moves in steps of a tenth of the debounce until the
	// worker has issued (the queue's timers are set on its own goroutine,
	// after an unknown real time).
	start := h.clock.Now()
	eventually(t, "the CRL re-issued with the revocation", func() bool {
		if c := cached(h, key{"ca", "k2"}); c != first && c.Entries == 1 {
			return true
		}
		h.clock.Step(Debounce / 10)
		return false
	})
	second := cached(h, key{"ca", "k2"})
	if waited := second.Issued.Sub(start); waited < Debounce || waited > h.m.Validity()/4 {
		t.Fatalf("re-issued %s after the change, want the debounce %s (and far less than half the validity)", waited, Debounce)
	}
	if got := <-notified; got != "ca" {
		t.Fatalf("subscriber told %q", got)
	}
	if second.Number.Cmp(first.Number) <= 0 {
		t.Fatalf("number %s after %s", second.Number, first.Number)
	}
	served, err := h.m.Get(h.ctx, "ca", "k2")
	if err != nil || served != second {
		t.Fatalf("served %v (%v), want the re-issued CRL", served, err)
	}

	// Nothing changes: issued again at half the validity, long before
	// nextUpdate.
	eventually(t, "the CRL re-issued at half its validity", func() bool {
		if cached(h, key{"ca", "k2"}) != second {
			return true
		}
		h.clock.Step(time.Minute)
		return false
	})
	third := cached(h, key{"ca", "k2"})
	if at := third.Issued.Sub(second.Issued); at < h.m.Validity()/2 || at > h.m.Validity()/2+2*time.Minute {
		t.Fatalf("re-issued %s after the last issue, want at half the validity %s", at, h.m.Validity()/2)
	}
	if !third.ThisUpdate.After(second.ThisUpdate) || !third.NextUpdate.After(second.NextUpdate) || third.Number.Cmp(second.Number) <= 0 {
		t.Fatalf("re-issued CRL: thisUpdate %s nextUpdate %s number %s, after %s %s %s", third.ThisUpdate, third.NextUpdate, third.Number, second.ThisUpdate, second.NextUpdate, second.Number)
	}
	if !h.clock.Now().Before(second.NextUpdate) {
		t.Fatal("re-issued only at nextUpdate")
	}
	parse(t, third, h.keys.get("ca", 0).Cert)
}

func TestCRLOfADestroyedKeyIsForgotten(t *testing.T) {
	h := start(t, true)
	if _, err := h.m.Get(h.ctx, "ca", "k1"); err != nil {
		t.Fatal(err)
	}
	// The rotation completes: k1 is destroyed.
	h.keys.mu.Lock()
	h.keys.cas["ca"] = [2]*authority.Authority{h.keys.cas["ca"][0], nil}
	h.keys.mu.Unlock()
	if _, err := h.m.Get(h.ctx, "ca", "k1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("CRL of a destroyed key: %v, want ErrNotFound", err)
	}
	eventually(t, "the destroyed key's entry dropped", func() bool {
		h.m.mu.Lock()
		_, ok := h.m.entries[key{"ca", "k1"}]
		h.m.mu.Unlock()
		if !ok {
			return true
		}
		h.clock.Step(time.Minute)
		return false
	})
}

func TestCRLNotIssuedBeforeTheRevocationsAreLoaded(t *testing.T) {
	client := fake.NewSimpleClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	m, err := New(Config{Keys: newFakeKeys(t), Revocations: factory.Certificates().V1alpha1().Revocations().Informer()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(context.Background(), "ca", "k2"); !errors.Is(err, ErrNotReady) {
		t.Fatalf("before sync: %v, want ErrNotReady", err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/crl/ca", nil))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("before sync: HTTP %d, Retry-After %q; want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
}

func TestValidityBounds(t *testing.T) {
	factory := informers.NewSharedInformerFactory(fake.NewSimpleClientset(), 0)
	if _, err := New(Config{Keys: newFakeKeys(t), Revocations: factory.Certificates().V1alpha1().Revocations().Informer(), Validity: time.Minute}); err == nil {
		t.Fatal("a validity below the minimum was accepted")
	}
}

func TestHandler(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	h := start(t, false, revocation("ca", "k1", "b1", "Superseded", now, now.Add(time.Hour)))
	srv := httptest.NewServer(h.m.Handler())
	t.Cleanup(srv.Close)
	get := func(path string, header ...string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}
	for _, tc := range []struct {
		path string
		ca   *x509.Certificate
		n    int
	}{{"/crl/ca", h.keys.get("ca", 0).Cert, 0}, {"/crl/ca/k2", h.keys.get("ca", 0).Cert, 0}, {"/crl/ca/k1", h.keys.get("ca", 1).Cert, 1}} {
		resp, body := get(tc.path)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != ContentType {
			t.Fatalf("GET %s: %d %q", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		rl := parse(t, &CRL{DER: body}, tc.ca)
		if len(rl.RevokedCertificateEntries) != tc.n {
			t.Fatalf("GET %s: %d entries, want %d", tc.path, len(rl.RevokedCertificateEntries), tc.n)
		}
		cc := resp.Header.Get("Cache-Control")
		age, err := strconv.Atoi(strings.TrimPrefix(cc, "public, max-age="))
		if err != nil || age <= 0 || time.Duration(age)*time.Second > MaxAge || time.Duration(age)*time.Second > rl.NextUpdate.Sub(h.clock.Now()) {
			t.Fatalf("GET %s: Cache-Control %q: want a max-age within %s and nextUpdate", tc.path, cc, MaxAge)
		}
		etag := resp.Header.Get("ETag")
		if resp, _ := get(tc.path, "If-None-Match", etag); resp.StatusCode != http.StatusNotModified {
			t.Fatalf("GET %s If-None-Match %s: %d, want 304", tc.path, etag, resp.StatusCode)
		}
	}
	for _, path := range []string{"/crl/", "/crl/nope", "/crl/ca/k3", "/crl/ca/k2/x", "/crl//k2", "/crl/ca/"} {
		if resp, _ := get(path); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
	resp, err := http.Post(srv.URL+"/crl/ca", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
}

func TestMaxAgeNeverPastNextUpdate(t *testing.T) {
	for _, tc := range []struct {
		until time.Duration
		want  int
	}{{24 * time.Hour, int(MaxAge / time.Second)}, {30 * time.Second, 30}, {1500 * time.Millisecond, 1}, {0, 0}, {-time.Minute, 0}} {
		if got := maxAge(tc.until); got != tc.want {
			t.Errorf("maxAge(%s) = %d, want %d", tc.until, got, tc.want)
		}
	}
}

// failingSigner is a key store signer (not a Go key) that returns a wrong
// signature.
type failingSigner struct{ crypto.Signer }

func (s failingSigner) Sign(r io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	sig, err := s.Signer.Sign(r, digest, opts)
	if err == nil {
		sig = append([]byte(nil), sig...)
		sig[len(sig)-1] ^= 1
	}
	return sig, err
}

func TestIssueChecksSignaturesOfKeyStores(t *testing.T) {
	ca := newCA(t, "ca", "k")
	now := time.Now()
	if _, err := Issue(nil, ca.Cert, failingSigner{ca.Signer}, big.NewInt(1), now, time.Hour); err == nil || !strings.Contains(err.Error(), "signature returned by signer is invalid") {
		t.Fatalf("a key store's wrong signature: %v", err)
	}
	type wrapped struct{ crypto.Signer }
	crl, err := Issue(nil, ca.Cert, wrapped{ca.Signer}, big.NewInt(1), now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	parse(t, crl, ca.Cert)
}

// TestLiveHoldsEveryKeysCRL: during a rotation a CA's live CRLs are the
// current key's and then the previous key's, each signed by its own key
// (the bundle trusts both); once the previous key is destroyed, the
// current key's alone.
func TestLiveHoldsEveryKeysCRL(t *testing.T) {
	h := start(t, false)
	live, err := h.m.Live(h.ctx, "ca")
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 2 || live[0].KeyID != "k2" || live[1].KeyID != "k1" {
		t.Fatalf("live CRLs %v, want k2's then k1's", keyIDs(live))
	}
	parse(t, live[0], h.keys.get("ca", 0).Cert)
	parse(t, live[1], h.keys.get("ca", 1).Cert)

	h.keys.mu.Lock()
	h.keys.cas["ca"] = [2]*authority.Authority{h.keys.cas["ca"][0], nil}
	h.keys.mu.Unlock()
	if live, err = h.m.Live(h.ctx, "ca"); err != nil || len(live) != 1 || live[0].KeyID != "k2" {
		t.Fatalf("after the rotation: %v (%v), want k2's alone", keyIDs(live), err)
	}
	if _, err := h.m.Live(h.ctx, "no-such-ca"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an unknown CA: %v, want ErrNotFound", err)
	}
}

func keyIDs(crls []*CRL) []string {
	out := make([]string, 0, len(crls))
	for _, c := range crls {
		out = append(out, c.KeyID)
	}
	return out
}

// TestCRLDateMetrics: each key's last CRL exports its thisUpdate and
// nextUpdate (what the alert on a CRL not re-issued compares with the
// time), and a destroyed key's series go with it.
func TestCRLDateMetrics(t *testing.T) {
	RegisterMetrics() // unregistered metrics record nothing
	h := start(t, false)
	// A CA of its own: the gauges are global to the package's tests.
	h.keys.mu.Lock()
	h.keys.cas["metrics-ca"] = [2]*authority.Authority{newCA(t, "metrics-ca", "m2"), newCA(t, "metrics-ca", "m1")}
	h.keys.mu.Unlock()
	live, err := h.m.Live(h.ctx, "metrics-ca")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range live {
		next, err := testutil.GetGaugeMetricValue(nextUpdateGauge.WithLabelValues("metrics-ca", c.KeyID))
		if err != nil {
			t.Fatal(err)
		}
		this, err := testutil.GetGaugeMetricValue(thisUpdateGauge.WithLabelValues("metrics-ca", c.KeyID))
		if err != nil {
			t.Fatal(err)
		}
		if int64(next) != c.NextUpdate.Unix() || int64(this) != c.ThisUpdate.Unix() || c.NextUpdate.Sub(c.ThisUpdate) != time.Hour+Backdate {
			t.Fatalf("key %s: gauges thisUpdate %v nextUpdate %v, CRL %s %s", c.KeyID, this, next, c.ThisUpdate, c.NextUpdate)
		}
	}
	h.m.forget(key{"metrics-ca", "m1"})
	if got := nextUpdateSeries(t, "metrics-ca"); len(got) != 1 || got[0] != "m2" {
		t.Fatalf("nextUpdate series of keys %v after m1 was forgotten, want m2's alone", got)
	}
}

// nextUpdateSeries are the key IDs of a CA's nextUpdate series in the
// registry.
func nextUpdateSeries(t *testing.T, ca string) []string {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if f.GetName() != "rekey_crl_next_update_timestamp_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["ca_name"] == ca {
				out = append(out, labels["key_id"])
			}
		}
	}
	return out
}
