package jwtsigner

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics/testutil"
	externaljwtv1 "k8s.io/externaljwt/apis/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	"rekey.io/rekey/pkg/jwtkey"
)

// remote stands in for rekey-apiserver's signjwt: it signs with key (as
// kid) or fails with err, and counts the calls.
type remote struct {
	mu    sync.Mutex
	key   *testKey
	err   error
	calls int
	// rewrite, when set, changes the claims before they are signed (a
	// mutating webhook in rekey-apiserver, say).
	rewrite func(claims string) string
	// signer, when set, signs in key's stead (still answering key's kid).
	signer crypto.Signer
}

func (r *remote) set(key *testKey, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.key, r.err = key, err
}

func (r *remote) react(action k8stesting.Action) (bool, runtime.Object, error) {
	if action.GetSubresource() != "signjwt" {
		return false, nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.err != nil {
		return true, nil, r.err
	}
	req := action.(k8stesting.CreateAction).GetObject().(*rotationv1alpha1.JWTSignRequest)
	c := req.Claims
	if r.rewrite != nil {
		c = r.rewrite(c)
	}
	signer := r.key.kp.Key
	if r.signer != nil {
		signer = r.signer
	}
	hdr, sig, err := jwtkey.Sign(signer, r.key.kid, c)
	if err != nil {
		return true, nil, err
	}
	return true, &rotationv1alpha1.JWTSignRequest{Header: hdr, Signature: sig, KeyID: r.key.kid}, nil
}

// newClient is a fake clientset holding objs, whose signjwt is r's.
func newClient(r *remote, objs ...runtime.Object) *fake.Clientset {
	client := fake.NewSimpleClientset(objs...)
	client.PrependReactor("create", "certificateauthorities", r.react)
	return client
}

// unreachable is a clientset every call of which fails as a server that
// cannot be dialled does.
func unreachable() *fake.Clientset {
	client := fake.NewSimpleClientset()
	refused := errors.New(`Post "https://rekey:443": dial tcp 10.0.0.1:443: connect: connection refused`)
	client.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, refused })
	client.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) { return true, nil, refused })
	return client
}

func testOptions(t *testing.T) Options {
	dir := t.TempDir()
	return Options{
		CertificateAuthority: "sa",
		Socket:               filepath.Join(dir, "run", "jwt.sock"),
		SocketMode:           0o600,
		CacheFile:            filepath.Join(dir, "cache", "keys.json"),
		RefreshHint:          30 * time.Second,
		FirstKeysWait:        200 * time.Millisecond,
	}
}

// started is a running Signer and a gRPC client of its socket.
type started struct {
	*Signer
	grpc externaljwtv1.ExternalJWTSignerClient
	stop func() error
	// logs is what the signer logged (at verbosity 5).
	logs ktesting.Buffer
}

// start runs a Signer (its clock replaced when clk is set) and dials it.
func start(t *testing.T, client *fake.Clientset, opts Options, clk *testingclock.FakeClock) *started {
	t.Helper()
	RegisterMetrics()
	s, err := New(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	if clk != nil {
		s.clock = clk
	}
	s.reportBackoff = func() wait.Backoff { return wait.Backoff{Duration: 10 * time.Millisecond, Factor: 1, Steps: 1 << 30} }
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	eventually(t, "the socket is served", func() bool {
		_, err := os.Stat(opts.Socket)
		return err == nil
	})
	conn, err := grpc.NewClient("unix://"+opts.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = conn.Close()
		cancel()
		return <-done
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return &started{Signer: s, grpc: externaljwtv1.NewExternalJWTSignerClient(conn), stop: stop, logs: logger.GetSink().(ktesting.Underlier).GetBuffer()}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// fetch is FetchKeys' answer as "kid" or "kid!" (excluded from discovery).
func (s *started) fetch(t *testing.T) ([]string, *externaljwtv1.FetchKeysResponse) {
	t.Helper()
	resp, err := s.grpc.FetchKeys(t.Context(), &externaljwtv1.FetchKeysRequest{})
	if err != nil {
		t.Fatalf("FetchKeys: %v", err)
	}
	var out []string
	for _, k := range resp.Keys {
		if k.ExcludeFromOidcDiscovery {
			out = append(out, k.KeyId+"!")
		} else {
			out = append(out, k.KeyId)
		}
	}
	return out, resp
}

func claims(t *testing.T) string {
	t.Helper()
	return base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"https://kubernetes.default.svc","sub":"system:serviceaccount:default:default","exp":1700003600,"iat":1700000000}`))
}

// cachedKIDs are the kids of the cache file ("" when unreadable).
func cachedKIDs(path string) string {
	set, err := ReadCache(path, "sa")
	if err != nil || set == nil {
		return ""
	}
	var out []string
	for _, k := range set.Keys {
		out = append(out, k.KeyID)
	}
	return strings.Join(out, " ")
}

// metric is a metric's value; -1 (which no test expects) when it cannot be read.
func metric(v float64, err error) float64 {
	if err != nil {
		return -1
	}
	return v
}

func TestValidate(t *testing.T) {
	ok := Options{CertificateAuthority: "sa", Socket: "/run/rekey/s.sock", CacheFile: "/c", RefreshHint: time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	abstract := ok
	abstract.Socket, abstract.AllowAbstractSocket = "@rekey", true
	if err := abstract.Validate(); err != nil {
		t.Fatalf("an abstract socket allowed: %v", err)
	}
	for name, tc := range map[string]struct {
		mutate func(*Options)
		want   string
	}{
		"no CA":           {func(o *Options) { o.CertificateAuthority = "" }, "--certificate-authority is required"},
		"bad CA":          {func(o *Options) { o.CertificateAuthority = "S A" }, "--certificate-authority"},
		"no socket":       {func(o *Options) { o.Socket = "" }, "--socket"},
		"only @":          {func(o *Options) { o.Socket = "@"; o.AllowAbstractSocket = true }, "--socket"},
		"abstract":        {func(o *Options) { o.Socket = "@rekey" }, "--allow-abstract-socket"},
		"mode too wide":   {func(o *Options) { o.SocketMode = os.ModeSetuid | 0o600 }, "--socket-mode"},
		"no cache":        {func(o *Options) { o.CacheFile = "" }, "--cache-file"},
		"bad consumer":    {func(o *Options) { o.TrustConsumer = "Kube_API" }, "--trust-consumer"},
		"zero hint":       {func(o *Options) { o.RefreshHint = 0 }, "--refresh-hint"},
		"fractional hint": {func(o *Options) { o.RefreshHint = 1500 * time.Millisecond }, "--refresh-hint"},
	} {
		o := ok
		tc.mutate(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// The keys are written to the cache file, and a signer started again with
// no server to reach serves them from it at once: FetchKeys and Metadata
// answer, Sign fails Unavailable.
func TestServedFromCacheWithoutTheServer(t *testing.T) {
	a := mkKey(t, "a")
	opts := testOptions(t)
	r := &remote{key: a}
	first := start(t, newClient(r, saCA(a, nil, nil)), opts, nil)
	eventually(t, "the cache file", func() bool { return cachedKIDs(opts.CacheFile) == a.kid })
	got, resp1 := first.fetch(t)
	if !slices.Equal(got, []string{a.kid}) {
		t.Fatalf("FetchKeys = %v", got)
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	// SIGTERM (the context's end) removed the socket.
	if _, err := os.Stat(opts.Socket); !os.IsNotExist(err) {
		t.Fatalf("the socket is still there after the signer stopped: %v", err)
	}

	second := start(t, unreachable(), opts, nil)
	got, resp2 := second.fetch(t)
	if !slices.Equal(got, []string{a.kid}) || !resp2.DataTimestamp.AsTime().Equal(resp1.DataTimestamp.AsTime()) {
		t.Fatalf("FetchKeys from the cache = %v at %v, want %v at %v", got, resp2.DataTimestamp.AsTime(), a.kid, resp1.DataTimestamp.AsTime())
	}
	pub, err := x509.ParsePKIXPublicKey(resp2.Keys[0].Key)
	if err != nil || !a.kp.Cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(pub) {
		t.Fatalf("the cached key is not the CA's: %v", err)
	}
	md, err := second.grpc.Metadata(t.Context(), &externaljwtv1.MetadataRequest{})
	if err != nil || md.MaxTokenExpirationSeconds != 3600 {
		t.Fatalf("Metadata from the cache = %v, %v", md, err)
	}
	_, err = second.grpc.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: claims(t)})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Sign with rekey-apiserver unreachable = %v, want Unavailable", err)
	}
}

// With no cache and no CA read, FetchKeys and Metadata answer Unavailable
// (after a short wait); a corrupt cache is no cache.
func TestNothingToServe(t *testing.T) {
	opts := testOptions(t)
	if err := os.MkdirAll(filepath.Dir(opts.CacheFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(opts.CacheFile, []byte(`{"certificateAuthority":"sa","keys":[{`), 0o644); err != nil {
		t.Fatal(err)
	}
	RegisterMetrics()
	before := metric(testutil.GetCounterMetricValue(errorsTotal.WithLabelValues(opCacheRead)))
	s := start(t, unreachable(), opts, nil)
	if _, err := s.grpc.FetchKeys(t.Context(), &externaljwtv1.FetchKeysRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("FetchKeys = %v, want Unavailable", err)
	}
	if _, err := s.grpc.Metadata(t.Context(), &externaljwtv1.MetadataRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Metadata = %v, want Unavailable", err)
	}
	if after := metric(testutil.GetCounterMetricValue(errorsTotal.WithLabelValues(opCacheRead))); after != before+1 {
		t.Errorf("errors_total{cache_read} went from %v to %v, want one more", before, after)
	}
}

// A rotation's next key is served (and cached) as soon as the CA says so,
// before it signs; the metrics follow.
func TestNextKeyAppears(t *testing.T) {
	a, b := mkKey(t, "a"), mkKey(t, "b")
	opts := testOptions(t)
	r := &remote{key: a}
	client := newClient(r, saCA(a, nil, nil))
	s := start(t, client, opts, nil)
	eventually(t, "the current key", func() bool { return cachedKIDs(opts.CacheFile) == a.kid })
	_, resp1 := s.fetch(t)

	if _, err := client.RotationV1alpha1().CertificateAuthorities().Update(t.Context(), saCA(a, b, nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the next key cached", func() bool { return cachedKIDs(opts.CacheFile) == a.kid+" "+b.kid })
	got, resp2 := s.fetch(t)
	if !slices.Equal(got, []string{a.kid, b.kid}) {
		t.Fatalf("FetchKeys = %v, want current and next", got)
	}
	if !resp2.DataTimestamp.AsTime().After(resp1.DataTimestamp.AsTime()) && !resp2.DataTimestamp.AsTime().Equal(resp1.DataTimestamp.AsTime()) {
		t.Errorf("dataTimestamp went back: %v, then %v", resp1.DataTimestamp.AsTime(), resp2.DataTimestamp.AsTime())
	}
	for state, want := range map[State]float64{StateCurrent: 1, StateNext: 1, StatePrevious: 0, StateLegacy: 0} {
		if v := metric(testutil.GetGaugeMetricValue(keysServed.WithLabelValues(string(state)))); v != want {
			t.Errorf("keys{state=%s} = %v, want %v", state, v, want)
		}
	}

	// Prepared: b signs, a is previous.
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Update(t.Context(), saCA(b, nil, a), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.set(b, nil)
	eventually(t, "b current", func() bool { return cachedKIDs(opts.CacheFile) == b.kid+" "+a.kid })
	keys, _ := s.fetch(t)
	signedBefore := metric(testutil.GetCounterMetricValue(signaturesTotal.WithLabelValues(b.kid, resultSigned)))
	resp, err := s.grpc.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: claims(t)})
	if err != nil {
		t.Fatal(err)
	}
	if kid := headerKID(t, resp.Header); kid != b.kid || !slices.Contains(keys, kid) {
		t.Fatalf("signed with kid %q, want %q among the keys fetched %v", kid, b.kid, keys)
	}
	if v := metric(testutil.GetCounterMetricValue(signaturesTotal.WithLabelValues(b.kid, resultSigned))); v != signedBefore+1 {
		t.Errorf("signatures_total{%s,signed} = %v, want %v", b.kid, v, signedBefore+1)
	}
}

func headerKID(t *testing.T, hdr64 string) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(hdr64)
	if err != nil {
		t.Fatal(err)
	}
	const key = `"kid":"`
	i := strings.Index(string(raw), key)
	if i < 0 {
		t.Fatalf("no kid in %s", raw)
	}
	rest := string(raw)[i+len(key):]
	return rest[:strings.IndexByte(rest, '"')]
}

// A legacy key is served kept out of discovery, and dropped (from the
// answer and the cache) at its expireTime with no change of the CA.
func TestLegacyKeyExpires(t *testing.T) {
	a := mkKey(t, "a")
	legacyPEM, legacyKID := legacyKey(t)
	clk := testingclock.NewFakeClock(time.Now())
	opts := testOptions(t)
	client := newClient(&remote{key: a}, saCA(a, nil, nil, rotationv1alpha1.LegacyPublicKey{PublicKey: legacyPEM, ExpireTime: metav1.NewTime(clk.Now().Add(time.Hour))}))
	s := start(t, client, opts, clk)
	eventually(t, "the legacy key cached", func() bool { return cachedKIDs(opts.CacheFile) == a.kid+" "+legacyKID })
	if got, _ := s.fetch(t); !slices.Equal(got, []string{a.kid, legacyKID + "!"}) {
		t.Fatalf("FetchKeys = %v, want the legacy key excluded from discovery", got)
	}
	eventually(t, "the expiry timer", clk.HasWaiters)
	clk.Step(time.Hour)
	if got, _ := s.fetch(t); !slices.Equal(got, []string{a.kid}) {
		t.Fatalf("FetchKeys after expireTime = %v, want the legacy key gone", got)
	}
	eventually(t, "the legacy key dropped from the cache", func() bool { return cachedKIDs(opts.CacheFile) == a.kid })
	if v := metric(testutil.GetGaugeMetricValue(keysServed.WithLabelValues(string(StateLegacy)))); v != 0 {
		t.Errorf("keys{state=legacy} = %v after expireTime, want 0", v)
	}
}

// A signature with a kid the keys served lack makes the signer read the CA
// before answering; a kid the CA does not have either is refused.
func TestUnknownKIDRereads(t *testing.T) {
	a, b, c := mkKey(t, "a"), mkKey(t, "b"), mkKey(t, "c")
	opts := testOptions(t)
	r := &remote{key: b}
	// The server already says b signs; the signer has not seen it (no
	// watch runs here: the answer comes first).
	client := newClient(r, saCA(b, nil, a))
	RegisterMetrics()
	s, err := New(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	if err := s.applyCA(ctx, saCA(a, nil, nil)); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	hdr, _, kid, err := s.SignJWT(ctx, claims(t))
	if err != nil || kid != b.kid || headerKID(t, hdr) != b.kid {
		t.Fatalf("SignJWT = kid %q, %v; want %q", kid, err, b.kid)
	}
	gets := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "certificateauthorities" {
			gets++
		}
	}
	if gets != 1 {
		t.Errorf("%d reads of the CA, want 1", gets)
	}
	if cachedKIDs(opts.CacheFile) != b.kid+" "+a.kid {
		t.Errorf("cache %q after the read, want b and a", cachedKIDs(opts.CacheFile))
	}

	// c signs, and the CA does not name it.
	r.set(c, nil)
	before := metric(testutil.GetCounterMetricValue(signaturesTotal.WithLabelValues(c.kid, resultUnavailable)))
	if _, _, _, err := s.SignJWT(ctx, claims(t)); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not among the keys served") {
		t.Fatalf("SignJWT with an unknown kid = %v, want Unavailable", err)
	}
	if v := metric(testutil.GetCounterMetricValue(signaturesTotal.WithLabelValues(c.kid, resultUnavailable))); v != before+1 {
		t.Errorf("signatures_total{%s,unavailable} = %v, want %v", c.kid, v, before+1)
	}
}

// signjwt's refusals become gRPC codes kube-apiserver can tell apart.
func TestSignErrors(t *testing.T) {
	a := mkKey(t, "a")
	opts := testOptions(t)
	r := &remote{key: a}
	s := start(t, newClient(r, saCA(a, nil, nil)), opts, nil)
	eventually(t, "keys", func() bool { return cachedKIDs(opts.CacheFile) == a.kid })
	gr := rotationv1alpha1.Resource("certificateauthorities")
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{apierrors.NewInvalid(rotationv1alpha1.SchemeGroupVersion.WithKind("JWTSignRequest").GroupKind(), "sa", nil), codes.InvalidArgument},
		{apierrors.NewBadRequest("signs certificates"), codes.FailedPrecondition},
		{apierrors.NewForbidden(gr, "sa", errors.New("no")), codes.PermissionDenied},
		{apierrors.NewServiceUnavailable("not Ready"), codes.Unavailable},
		{apierrors.NewNotFound(gr, "sa"), codes.Unavailable},
		{apierrors.NewInternalError(errors.New("boom")), codes.Internal},
		{errors.New("dial tcp: connection refused"), codes.Unavailable},
	} {
		r.set(a, tc.err)
		if _, err := s.grpc.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: claims(t)}); status.Code(err) != tc.code {
			t.Errorf("signjwt error %v: Sign = %v, want %s", tc.err, err, tc.code)
		}
	}
	// Claims that are not a JSON object never reach rekey-apiserver.
	r.mu.Lock()
	calls := r.calls
	r.mu.Unlock()
	if _, err := s.grpc.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: "bm90IGpzb24"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Sign of bad claims = %v, want InvalidArgument", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls != calls {
		t.Error("bad claims were forwarded to signjwt")
	}
}

// The TrustConsumer is registered at start, and after each FetchKeys
// answer reports exactly the fingerprints of the CA keys in it: a key the
// CA has but kube-apiserver has not fetched is not reported.
func TestReportAfterFetch(t *testing.T) {
	a, b := mkKey(t, "a"), mkKey(t, "b")
	opts := testOptions(t)
	opts.TrustConsumer = "kube-apiserver-jwt.cp-1"
	legacyPEM, _ := legacyKey(t)
	client := newClient(&remote{key: a}, saCA(a, nil, nil, rotationv1alpha1.LegacyPublicKey{PublicKey: legacyPEM, ExpireTime: metav1.NewTime(time.Now().Add(time.Hour))}))
	RegisterMetrics()
	fetchesBefore := metric(testutil.GetCounterMetricValue(fetchesTotal))
	s := start(t, client, opts, nil)
	consumer := func() *rotationv1alpha1.TrustConsumer {
		tc, err := client.RotationV1alpha1().TrustConsumers().Get(context.Background(), opts.TrustConsumer, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return tc
	}
	held := func() []string {
		tc := consumer()
		if tc == nil || len(tc.Status.Holds) != 1 || tc.Status.Holds[0].CertificateAuthority != "sa" {
			return nil
		}
		return tc.Status.Holds[0].Fingerprints
	}
	eventually(t, "the consumer registered", func() bool { return consumer() != nil })
	if tc := consumer(); !slices.Equal(tc.Spec.CertificateAuthorities, []string{"sa"}) || len(tc.Status.Holds) != 0 {
		t.Fatalf("registered %+v, want CA sa and no report before a fetch", tc)
	}
	eventually(t, "the keys", func() bool { return strings.HasPrefix(cachedKIDs(opts.CacheFile), a.kid) })
	s.fetch(t)
	eventually(t, "the report of a", func() bool { return slices.Equal(held(), []string{a.fp}) })

	if _, err := client.RotationV1alpha1().CertificateAuthorities().Update(t.Context(), saCA(a, b, nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the next key served", func() bool { return strings.Contains(cachedKIDs(opts.CacheFile), b.kid) })
	if got := held(); !slices.Equal(got, []string{a.fp}) {
		t.Fatalf("reported %v before kube-apiserver fetched the next key, want only a", got)
	}
	s.fetch(t)
	want := []string{a.fp, b.fp}
	slices.Sort(want)
	eventually(t, "the report of a and b", func() bool { return slices.Equal(held(), want) })

	if v := metric(testutil.GetCounterMetricValue(fetchesTotal)); v != fetchesBefore+2 {
		t.Errorf("fetches_total = %v, want %v", v, fetchesBefore+2)
	}
	if v := metric(testutil.GetGaugeMetricValue(lastFetch)); v < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last_fetch_timestamp_seconds = %v", v)
	}
}

// A report refused is retried, and counted.
func TestReportRetried(t *testing.T) {
	a := mkKey(t, "a")
	opts := testOptions(t)
	opts.TrustConsumer = "kube-apiserver-jwt.cp-1"
	client := newClient(&remote{key: a}, saCA(a, nil, nil))
	var mu sync.Mutex
	refusals := 2
	client.PrependReactor("update", "trustconsumers", func(action k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if action.GetSubresource() == "status" && refusals > 0 {
			refusals--
			return true, nil, apierrors.NewServiceUnavailable("etcd is slow")
		}
		return false, nil, nil
	})
	RegisterMetrics()
	before := metric(testutil.GetCounterMetricValue(errorsTotal.WithLabelValues(opReport)))
	s := start(t, client, opts, nil)
	eventually(t, "the keys", func() bool { return cachedKIDs(opts.CacheFile) == a.kid })
	s.fetch(t)
	eventually(t, "the report", func() bool {
		tc, err := client.RotationV1alpha1().TrustConsumers().Get(context.Background(), opts.TrustConsumer, metav1.GetOptions{})
		return err == nil && len(tc.Status.Holds) == 1 && slices.Equal(tc.Status.Holds[0].Fingerprints, []string{a.fp})
	})
	if v := metric(testutil.GetCounterMetricValue(errorsTotal.WithLabelValues(opReport))); v != before+2 {
		t.Errorf("errors_total{report} = %v, want %v", v, before+2)
	}
}

// Neither claims nor tokens are logged, whether the signature succeeds, is
// refused, fails, or is of a kid the CA does not name.
func TestClaimsAndTokensNeverLogged(t *testing.T) {
	a, b := mkKey(t, "a"), mkKey(t, "b")
	opts := testOptions(t)
	r := &remote{key: a}
	s := start(t, newClient(r, saCA(a, nil, nil)), opts, nil)
	eventually(t, "keys", func() bool { return cachedKIDs(opts.CacheFile) == a.kid })
	const marker = "system:serviceaccount:secret-marker:default"
	c := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"` + marker + `","exp":1700003600,"iat":1700000000}`))
	var secrets []string
	resp, err := s.grpc.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: c})
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, resp.Signature)
	r.set(a, apierrors.NewInvalid(rotationv1alpha1.SchemeGroupVersion.WithKind("JWTSignRequest").GroupKind(), "sa", nil))
	_, _ = s.grpc.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: c})
	r.set(b, nil)
	_, _ = s.grpc.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: c})
	truncated := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"` + marker + `"`))
	_, _ = s.grpc.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: truncated})
	logs := s.logs.String()
	if !strings.Contains(logs, "Signed a service-account token") {
		t.Fatalf("the logs were not captured at verbosity 5:\n%s", logs)
	}
	for _, secret := range append(secrets, marker, c, truncated) {
		if strings.Contains(logs, secret) {
			t.Errorf("the logs hold %q:\n%s", secret, logs)
		}
	}
}

// What Sign answers kube-apiserver reaches TokenRequest callers (in
// kube-apiserver's 500): a code and a fixed reason per class, never the
// signer's user, the CA's name, condition messages or dial addresses. The
// full error is logged here.
func TestSignErrorsTellNoDetails(t *testing.T) {
	a := mkKey(t, "a")
	opts := testOptions(t)
	r := &remote{key: a}
	s := start(t, newClient(r, saCA(a, nil, nil)), opts, nil)
	eventually(t, "keys", func() bool { return cachedKIDs(opts.CacheFile) == a.kid })
	gr := rotationv1alpha1.Resource("certificateauthorities")
	const ca = "service-account-tokens"
	secrets := []string{ca, "rekey:jwt-signer:cp-1", "PKCS#11 slot 3", "10.96.0.17", "rekey-apiserver.rekey-system", "10.0.0.5", "JWTSignRequest"}
	for _, tc := range []struct {
		err  error
		code codes.Code
		want string
	}{
		{apierrors.NewForbidden(gr, ca, errors.New(`User "rekey:jwt-signer:cp-1" cannot create resource "certificateauthorities/signjwt"`)), codes.PermissionDenied, "the signer is not authorized to sign; see rekey-agent jwt-signer's log"},
		{apierrors.NewUnauthorized(`User "rekey:jwt-signer:cp-1": certificate expired`), codes.PermissionDenied, "the signer is not authorized to sign; see rekey-agent jwt-signer's log"},
		{apierrors.NewServiceUnavailable(`CertificateAuthority "service-account-tokens" is not Ready (KeyUnavailable): PKCS#11 slot 3 login failed`), codes.Unavailable, "the signing key is not ready; see rekey-agent jwt-signer's log"},
		{apierrors.NewNotFound(gr, ca), codes.Unavailable, "the signing key is not ready; see rekey-agent jwt-signer's log"},
		{errors.New(`Post "https://rekey-apiserver.rekey-system.svc:443/apis": dial tcp 10.96.0.17:443: connect: connection refused`), codes.Unavailable, "rekey-apiserver is unreachable; see rekey-agent jwt-signer's log"},
		{apierrors.NewInternalError(errors.New("etcd at 10.0.0.5:2379 timed out")), codes.Internal, "rekey-apiserver failed to sign; see rekey-agent jwt-signer's log"},
		{apierrors.NewBadRequest(`CertificateAuthority "service-account-tokens" signs certificates (spec.purpose Certificates), not service-account tokens`), codes.FailedPrecondition, "rekey-apiserver refused to sign with this CertificateAuthority; see rekey-agent jwt-signer's log"},
		{apierrors.NewTooManyRequests("rekey:jwt-signer:cp-1 is throttled", 1), codes.Unavailable, "rekey-apiserver is busy; try again"},
		{apierrors.NewInvalid(rotationv1alpha1.SchemeGroupVersion.WithKind("JWTSignRequest").GroupKind(), ca,
			field.ErrorList{field.Invalid(field.NewPath("claims"), field.OmitValueType{}, `"exp" - "iat" is 90000 s, more than spec.serviceAccountTokens.maxTokenExpiration (24h0m0s)`)}),
			codes.InvalidArgument, `rekey-apiserver refused the claims: "exp" - "iat" is 90000 s, more than spec.serviceAccountTokens.maxTokenExpiration (24h0m0s)`},
	} {
		r.set(a, tc.err)
		_, err := s.grpc.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: claims(t)})
		st := status.Convert(err)
		if st.Code() != tc.code || !strings.Contains(st.Message(), tc.want) {
			t.Errorf("signjwt error %v: Sign = %v, want %s %q", tc.err, err, tc.code, tc.want)
		}
		for _, secret := range secrets {
			if strings.Contains(st.Message(), secret) {
				t.Errorf("signjwt error %v: Sign's answer %q tells %q", tc.err, st.Message(), secret)
			}
		}
	}
	// The operator reads the details here.
	logs := s.logs.String()
	for _, want := range []string{"rekey:jwt-signer:cp-1", "PKCS#11 slot 3", "10.96.0.17", "10.0.0.5"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the logs do not hold %q:\n%s", want, logs)
		}
	}
}

// A signature that does not verify, over the claims this signer sent,
// with the key served for its kid is not handed to kube-apiserver: claims
// changed on the way (a mutating webhook in rekey-apiserver), or another
// key answering the kid.
func TestSignatureVerified(t *testing.T) {
	a, other := mkKey(t, "a"), mkKey(t, "other")
	opts := testOptions(t)
	r := &remote{key: a}
	s := start(t, newClient(r, saCA(a, nil, nil)), opts, nil)
	eventually(t, "keys", func() bool { return cachedKIDs(opts.CacheFile) == a.kid })
	if _, err := s.grpc.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: claims(t)}); err != nil {
		t.Fatalf("Sign of untouched claims: %v", err)
	}
	for name, tamper := range map[string]func(*remote){
		"claims rewritten": func(r *remote) {
			r.rewrite = func(string) string {
				return base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"https://kubernetes.default.svc","sub":"system:serviceaccount:kube-system:admin","exp":1700003600,"iat":1700000000}`))
			}
		},
		"another key": func(r *remote) { r.signer = other.kp.Key },
	} {
		r.mu.Lock()
		r.rewrite, r.signer = nil, nil
		tamper(r)
		r.mu.Unlock()
		before := metric(testutil.GetCounterMetricValue(signaturesTotal.WithLabelValues(a.kid, resultError)))
		resp, err := s.grpc.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: claims(t)})
		if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != "the signature does not verify" {
			t.Errorf("%s: Sign = %v, %v; want Internal, the signature does not verify", name, resp, err)
		}
		if v := metric(testutil.GetCounterMetricValue(signaturesTotal.WithLabelValues(a.kid, resultError))); v != before+1 {
			t.Errorf("%s: signatures_total{%s,error} = %v, want %v", name, a.kid, v, before+1)
		}
	}
}

// verifyJWS takes what jwtkey.Sign makes, ES256 and RS256, and nothing
// else: other claims, another key, a truncated signature.
func TestVerifyJWS(t *testing.T) {
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	otherEC, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	c := claims(t)
	for name, key := range map[string]crypto.Signer{"ES256": ecKey, "RS256": rsaKey} {
		hdr, sig, err := jwtkey.Sign(key, "kid", c)
		if err != nil {
			t.Fatal(err)
		}
		if err := verifyJWS(key.Public(), hdr, c, sig); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if err := verifyJWS(key.Public(), hdr, c+"x", sig); err == nil {
			t.Errorf("%s: other claims verify", name)
		}
		if err := verifyJWS(key.Public(), hdr, c, sig[:len(sig)-4]); err == nil {
			t.Errorf("%s: a truncated signature verifies", name)
		}
		if err := verifyJWS(otherEC.Public(), hdr, c, sig); err == nil {
			t.Errorf("%s: another key verifies", name)
		}
	}
}

// Only processes of the allowed uids are served: by default the signer's
// own and root's, so a test (one uid) is served; a signer that allows only
// another uid refuses it.
func TestAllowedUIDs(t *testing.T) {
	a := mkKey(t, "a")
	uid := uint32(os.Getuid())
	s, err := New(fake.NewSimpleClientset(), testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := slices.Compact([]uint32{uid, 0}); !slices.Equal(s.opts.AllowedUIDs, want) {
		t.Errorf("default allowed uids %v, want %v", s.opts.AllowedUIDs, want)
	}

	opts := testOptions(t)
	opts.AllowedUIDs = []uint32{uid + 1}
	other := start(t, newClient(&remote{key: a}, saCA(a, nil, nil)), opts, nil)
	if _, err := other.grpc.Sign(t.Context(), &externaljwtv1.SignJWTRequest{Claims: claims(t)}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Sign from a uid not allowed = %v, want PermissionDenied", err)
	}
	if _, err := other.grpc.FetchKeys(t.Context(), &externaljwtv1.FetchKeysRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("FetchKeys from a uid not allowed = %v, want PermissionDenied", err)
	}
}

// A socket mode that lets group or others connect, or an abstract socket,
// is served with a warning: any process that connects (and passes the uid
// check) can have any service-account token signed.
func TestWideSocketWarned(t *testing.T) {
	a := mkKey(t, "a")
	for name, mutate := range map[string]func(*Options){
		"group":  func(o *Options) { o.SocketMode = 0o660 },
		"others": func(o *Options) { o.SocketMode = 0o606 },
		"abstract": func(o *Options) {
			o.Socket = "@rekey-jwtsigner-test-" + filepath.Base(t.TempDir())
			o.AllowAbstractSocket = true
		},
	} {
		t.Run(name, func(t *testing.T) {
			opts := testOptions(t)
			mutate(&opts)
			s, err := New(newClient(&remote{key: a}, saCA(a, nil, nil)), opts)
			if err != nil {
				t.Fatal(err)
			}
			buf := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			lis, err := s.listen(klog.NewContext(context.Background(), buf))
			if err != nil {
				t.Fatal(err)
			}
			_ = lis.Close()
			if logs := buf.GetSink().(ktesting.Underlier).GetBuffer().String(); !strings.Contains(logs, "any service-account token") {
				t.Errorf("no warning logged:\n%s", logs)
			}
		})
	}
	// 0600 (the default) is not warned about.
	opts := testOptions(t)
	s, err := New(newClient(&remote{key: a}, saCA(a, nil, nil)), opts)
	if err != nil {
		t.Fatal(err)
	}
	buf := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	lis, err := s.listen(klog.NewContext(context.Background(), buf))
	if err != nil {
		t.Fatal(err)
	}
	_ = lis.Close()
	if logs := buf.GetSink().(ktesting.Underlier).GetBuffer().String(); strings.Contains(logs, "any service-account token") {
		t.Errorf("0600 warned about:\n%s", logs)
	}
}

// With no TrustConsumer, the start says that no rotation waits for this
// kube-apiserver.
func TestNoConsumerLogged(t *testing.T) {
	a := mkKey(t, "a")
	opts := testOptions(t)
	s := start(t, newClient(&remote{key: a}, saCA(a, nil, nil)), opts, nil)
	eventually(t, "keys", func() bool { return cachedKIDs(opts.CacheFile) == a.kid })
	if logs := s.logs.String(); !strings.Contains(logs, "no rotation of the CertificateAuthority waits for this kube-apiserver") {
		t.Errorf("no warning that nothing is reported:\n%s", logs)
	}
}

// The cache file records the CA's rotation phase and resourceVersion (a
// change of phase alone rewrites it, keeping dataTimestamp), and a signer
// that starts from it before the CA is read says loudly which keys it
// serves and what the CA was then: after a forced Complete it may be
// serving a key the CA dropped.
func TestCacheRecordsThePhase(t *testing.T) {
	a, b := mkKey(t, "a"), mkKey(t, "b")
	opts := testOptions(t)
	prepared := saCA(b, nil, a)
	prepared.ResourceVersion = "7"
	prepared.Status.Phase = rotationv1alpha1.PhasePreparing
	client := newClient(&remote{key: b}, prepared)
	first := start(t, client, opts, nil)
	cached := func() *Set {
		set, err := ReadCache(opts.CacheFile, "sa")
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	eventually(t, "the cache", func() bool { return cachedKIDs(opts.CacheFile) == b.kid+" "+a.kid })
	before := cached()
	if before.RotationPhase != rotationv1alpha1.PhasePreparing || before.ResourceVersion != "7" {
		t.Fatalf("cached phase %q, resourceVersion %q; want Preparing, 7", before.RotationPhase, before.ResourceVersion)
	}
	// The phase alone changes: the file follows, dataTimestamp stays.
	prepared = prepared.DeepCopy()
	prepared.ResourceVersion = "8"
	prepared.Status.Phase = rotationv1alpha1.PhasePrepared
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Update(t.Context(), prepared, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the phase cached", func() bool {
		set, err := ReadCache(opts.CacheFile, "sa")
		return err == nil && set != nil && set.RotationPhase == rotationv1alpha1.PhasePrepared
	})
	if after := cached(); after.ResourceVersion != "8" || !after.DataTimestamp.Equal(before.DataTimestamp) {
		t.Errorf("after a phase change: resourceVersion %q, dataTimestamp %v; want 8, %v unchanged", after.ResourceVersion, after.DataTimestamp, before.DataTimestamp)
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}

	second := start(t, unreachable(), opts, nil)
	if got, _ := second.fetch(t); !slices.Equal(got, []string{b.kid, a.kid}) {
		t.Fatalf("FetchKeys from the cache = %v", got)
	}
	logs := second.logs.String()
	for _, want := range []string{"from the cache file", "not read yet", a.kid + " (previous)", `rotationPhase="Prepared"`, `resourceVersion="8"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the start from the cache does not log %q:\n%s", want, logs)
		}
	}
}
