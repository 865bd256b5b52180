package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics/testutil"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/pkg/signing"
)

// credentialHeader tells the fake API server which credential a request
// was made with: the SHA-256 of the client certificate, or "bootstrap".
const credentialHeader = "X-Test-Credential"

// revokingServer is kube-apiserver as far as the agent sees it, with
// rekey's authorization webhook first: a request made with a revoked
// certificate is refused with 403 and the webhook's reason; otherwise
// SelfSubjectReviews are answered and node client requests issued at
// once (bootstrap through nodeclient, renewal through selfnodeclient).
type revokingServer struct {
	t  *testing.T
	ca *pki.KeyPair

	mu      sync.Mutex
	revoked map[string]bool
	// calls are "<credential> <method> <path>", in order.
	calls []string
}

func (s *revokingServer) revoke(sha string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked[sha] = true
}

func (s *revokingServer) log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func (s *revokingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cred := r.Header.Get(credentialHeader)
	s.mu.Lock()
	s.calls = append(s.calls, cred+" "+r.Method+" "+r.URL.Path)
	revoked := s.revoked[cred]
	s.mu.Unlock()
	status := func(err *apierrors.StatusError) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(err.ErrStatus.Code))
		st := err.ErrStatus
		st.Kind, st.APIVersion = "Status", "v1"
		_ = json.NewEncoder(w).Encode(&st)
	}
	if revoked {
		// What kube-apiserver answers when a webhook denies: the
		// authorizer's reason after the usual sentence.
		status(refusedAsRevoked(requestAttributes(r), strings.ToUpper(cred), "KeyCompromise"))
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/apis/authentication.k8s.io/v1/selfsubjectreviews":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview","status":{"userInfo":{"username":"system:node:n1"}}}`)
	case r.Method == http.MethodGet:
		status(apierrors.NewNotFound(certv1alpha1.Resource("certificatesigningrequests"), filepath.Base(r.URL.Path)))
	case r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/nodeclient") || strings.HasSuffix(r.URL.Path, "/selfnodeclient")):
		if strings.HasSuffix(r.URL.Path, "/selfnodeclient") == (cred == "bootstrap") {
			status(apierrors.NewForbidden(certv1alpha1.Resource("certificatesigningrequests"), "", errors.New("wrong path for this credential")))
			return
		}
		var csr certv1alpha1.CertificateSigningRequest
		if err := json.NewDecoder(r.Body).Decode(&csr); err != nil {
			status(apierrors.NewBadRequest(err.Error()))
			return
		}
		req, err := validation.ParseCSR(csr.Spec.Request)
		if err != nil {
			status(apierrors.NewBadRequest(err.Error()))
			return
		}
		csr.Status.Certificate = issue(s.t, s.ca, req.PublicKey, req.Subject.CommonName, time.Now().Add(-time.Minute), time.Hour)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(&csr)
	default:
		status(apierrors.NewBadRequest("unexpected " + r.Method + " " + r.URL.Path))
	}
}

// newRevokingServer starts the server and returns a NewClient for it that
// marks each request with its credential.
func newRevokingServer(t *testing.T) (*revokingServer, func(*tls.Certificate) (clientset.Interface, error)) {
	s := &revokingServer{t: t, ca: newCA(t), revoked: map[string]bool{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, func(current *tls.Certificate) (clientset.Interface, error) {
		cred := "bootstrap"
		if current != nil {
			cred = CertificateSHA256(current.Leaf)
		}
		cfg := &rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripper(func(r *http.Request) (*http.Response, error) {
				r = r.Clone(r.Context())
				r.Header.Set(credentialHeader, cred)
				return rt.RoundTrip(r)
			})
		})
		return clientset.NewForConfig(cfg)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestProbeRevoked(t *testing.T) {
	s, newClient := newRevokingServer(t)
	m := &Manager{Store: &Store{Dir: t.TempDir(), Prefix: PrefixClient}, Template: ClientTemplate(DefaultSigner, "n1"), NewClient: newClient}
	pair, err := m.Once(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	client, err := newClient(pair)
	if err != nil {
		t.Fatal(err)
	}
	if err := ProbeRevoked(context.Background(), client); err != nil {
		t.Fatalf("a certificate that is not revoked: %v", err)
	}
	sha := CertificateSHA256(pair.Leaf)
	s.revoke(sha)
	err = ProbeRevoked(context.Background(), client)
	revoked := AsRevoked(err)
	if revoked == nil || revoked.SHA256 != sha || !strings.Contains(revoked.Message, "was revoked (KeyCompromise)") {
		t.Fatalf("a revoked certificate: %v", err)
	}
	if got := s.log(); !strings.HasSuffix(got[len(got)-1], " POST /apis/authentication.k8s.io/v1/selfsubjectreviews") {
		t.Fatalf("probed with %q", got[len(got)-1])
	}

	// No server: the error, which is not a revocation.
	dead, err := clientset.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ProbeRevoked(context.Background(), dead); err == nil || AsRevoked(err) != nil {
		t.Fatalf("no server: %v", err)
	}
}

// refusedAsRevoked is kube-apiserver's 403 when rekey's webhook denies
// the request (the authorizer's sentence, then the webhook's reason).
func refusedAsRevoked(attrs authorizer.AttributesRecord, sha, reason string) *apierrors.StatusError {
	return responsewriters.ForbiddenStatusError(attrs, fmt.Sprintf("rekey: certificate X509SHA256=%s was revoked (%s) at 2026-11-24T19:00:00Z", sha, reason))
}

// requestAttributes is, roughly, what kube-apiserver's authorizers are
// asked about r (/apis/GROUP/VERSION/RESOURCE[/NAME[/SUBRESOURCE]]).
func requestAttributes(r *http.Request) authorizer.AttributesRecord {
	attrs := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "system:node:n1"}, Verb: "get", Path: r.URL.Path}
	if r.Method == http.MethodPost {
		attrs.Verb = "create"
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) < 4 || parts[0] != "apis" {
		return attrs
	}
	attrs.ResourceRequest = true
	attrs.APIGroup, attrs.APIVersion, attrs.Resource = parts[1], parts[2], parts[3]
	if len(parts) > 4 {
		attrs.Name = parts[4]
	}
	if len(parts) > 5 {
		attrs.Subresource = parts[5]
	}
	return attrs
}

func TestAsRevoked(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	gr := schema.GroupResource{Resource: "nodes"}
	review := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "system:node:n1"}, Verb: "create", ResourceRequest: true,
		APIGroup: "authentication.k8s.io", APIVersion: "v1", Resource: "selfsubjectreviews"}
	namespaced := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: `odd "name" <&>: rekey: certificate X509SHA256=` + sha + " was revoked"}, Verb: "watch", ResourceRequest: true,
		APIGroup: "certificates.rekey.io", APIVersion: "v1alpha1", Resource: "signers", Subresource: "status", Name: "s", Namespace: "ns"}
	nonResource := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "system:node:n1"}, Verb: "get", Path: "/healthz"}
	for name, tc := range map[string]struct {
		err  error
		want string
	}{
		"the webhook's 403":                  {refusedAsRevoked(review, sha, "Unspecified"), sha},
		"upper case hex":                     {refusedAsRevoked(review, strings.ToUpper(sha), "Unspecified"), sha},
		"a namespaced subresource, any user": {refusedAsRevoked(namespaced, sha, "KeyCompromise"), sha},
		"a non-resource request":             {refusedAsRevoked(nonResource, sha, "KeyCompromise"), sha},
		"the webhook's 403, wrapped":         {fmt.Errorf("renewing: %w", refusedAsRevoked(review, sha, "Unspecified")), sha},
		// Another authorizer's reason, or rekey's reason not where the
		// denying authorizer's goes.
		"RBAC's refusal":                         {responsewriters.ForbiddenStatusError(review, ""), ""},
		"another authorizer's reason quoting it": {responsewriters.ForbiddenStatusError(review, "policy: X509SHA256="+sha+" was revoked"), ""},
		"rekey's reason without the sentence":    {apierrors.NewForbidden(gr, "n1", fmt.Errorf("rekey: certificate X509SHA256=%s was revoked (Unspecified) at t", sha)), ""},
		"a 403 whose details are not the message's": {func() error {
			err := refusedAsRevoked(review, sha, "Unspecified")
			err.ErrStatus.Details.Kind = "nodes"
			return err
		}(), ""},
		"a 500 with the message": {func() error {
			err := refusedAsRevoked(review, sha, "Unspecified")
			err.ErrStatus.Code, err.ErrStatus.Reason = http.StatusInternalServerError, metav1.StatusReasonInternalError
			return err
		}(), ""},
		"another 403":            {apierrors.NewForbidden(gr, "n1", errors.New("no RBAC")), ""},
		"a 403 without the hash": {apierrors.NewForbidden(gr, "n1", errors.New("rekey: certificate was revoked")), ""},
		// A 401 says nothing about why: never taken for a revocation.
		"a 401":         {apierrors.NewUnauthorized(fmt.Sprintf("X509SHA256=%s was revoked", sha)), ""},
		"not an error":  {nil, ""},
		"a plain error": {errors.New("X509SHA256=" + sha + " was revoked"), ""},
	} {
		r := AsRevoked(tc.err)
		if got := ""; r != nil {
			got = r.SHA256
			if got != tc.want {
				t.Errorf("%s: %q, want %q", name, got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("%s: not taken for a revocation", name)
		}
	}
}

// TestRunHealsARevokedCertificate: once the server refuses the current
// certificate as revoked, Run's periodic check notices, discards the pair
// (exec-credential has nothing to hand out meanwhile) and bootstraps a
// new one with a new key and the bootstrap credentials; the new one is
// used from then on.
func TestRunHealsARevokedCertificate(t *testing.T) {
	RegisterMetrics()
	s, newClient := newRevokingServer(t)
	store := &Store{Dir: t.TempDir(), Prefix: PrefixClient}
	m := &Manager{Store: store, Template: ClientTemplate(DefaultSigner, "n1"), NewClient: newClient}
	before, _ := testutil.GetCounterMetricValue(revokedCertificates.WithLabelValues(PrefixClient))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Managers: []*Manager{m}, RevocationCheckInterval: 50 * time.Millisecond})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var first *tls.Certificate
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var err error
		first, err = store.Current()
		return err == nil, nil
	}); err != nil {
		t.Fatal("no certificate bootstrapped")
	}
	firstPath, err := store.currentPair()
	if err != nil {
		t.Fatal(err)
	}
	revokedSHA := CertificateSHA256(first.Leaf)
	s.revoke(revokedSHA)

	var second *tls.Certificate
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		cur, err := store.Current()
		if err == nil && CertificateSHA256(cur.Leaf) != revokedSHA {
			second = cur
			return true, nil
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the revoked certificate was not replaced; calls %v", s.log())
	}
	if signing.PublicKeysEqual(first.Leaf.PublicKey, second.Leaf.PublicKey) {
		t.Fatal("the new certificate is for the revoked certificate's key")
	}
	if _, err := os.Stat(firstPath); !os.IsNotExist(err) {
		t.Errorf("the revoked pair file is still there: %v", err)
	}
	// The new certificate was asked for with the bootstrap credentials
	// (the revoked one is refused everywhere), through nodeclient.
	var asked []string
	for _, c := range s.log() {
		if strings.Contains(c, "nodeclient") {
			asked = append(asked, c)
		}
	}
	if len(asked) != 2 || !strings.HasPrefix(asked[1], "bootstrap POST ") || !strings.HasSuffix(asked[1], "/nodeclient") {
		t.Fatalf("requests for certificates: %v", asked)
	}
	after, _ := testutil.GetCounterMetricValue(revokedCertificates.WithLabelValues(PrefixClient))
	if after != before+1 {
		t.Errorf("rekey_agent_revoked_certificates_total went from %v to %v", before, after)
	}
	// The new certificate is not revoked: it stays.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 300*time.Millisecond, true, func(context.Context) (bool, error) {
		cur, err := store.Current()
		return err != nil || CertificateSHA256(cur.Leaf) != CertificateSHA256(second.Leaf), nil
	}); err == nil {
		t.Fatal("the new certificate was replaced too")
	}
}

// TestOnceRenewalRefusedAsRevoked: without the periodic check, a renewal
// made with a revoked certificate is refused (403 naming it); Once then
// bootstraps at once instead of retrying with it after a backoff.
func TestOnceRenewalRefusedAsRevoked(t *testing.T) {
	s, newClient := newRevokingServer(t)
	store := &Store{Dir: t.TempDir(), Prefix: PrefixClient}
	m := &Manager{Store: store, Template: ClientTemplate(DefaultSigner, "n1"), NewClient: newClient}
	first, err := m.Once(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s.revoke(CertificateSHA256(first.Leaf))
	// Due now: renewed before its expiry by more than its lifetime.
	m.RenewBefore = 2 * time.Hour
	second, err := m.Once(context.Background())
	if err != nil {
		t.Fatalf("Once: %v; calls %v", err, s.log())
	}
	if CertificateSHA256(second.Leaf) == CertificateSHA256(first.Leaf) {
		t.Fatal("still the revoked certificate")
	}
	calls := s.log()
	if !strings.HasSuffix(calls[len(calls)-1], "/nodeclient") || !strings.HasPrefix(calls[len(calls)-1], "bootstrap ") {
		t.Fatalf("calls %v: want the renewal refused, then a bootstrap", calls)
	}
}

// A revocation the server reports for another certificate (the client
// certificate, refusing the serving certificate's renewal) leaves this
// manager's pair alone; DiscardCurrent also leaves a pair renewed since.
func TestDiscardOnlyTheRevokedPair(t *testing.T) {
	f := &fakeSigner{t: t, ca: newCA(t)}
	m, _ := newManager(t, f)
	pair, err := m.Once(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m.NoteRevoked(strings.Repeat("0", 64))
	if again, err := m.Once(context.Background()); err != nil || CertificateSHA256(again.Leaf) != CertificateSHA256(pair.Leaf) || f.creates != 1 {
		t.Fatalf("another certificate's revocation: %v, %d creates", err, f.creates)
	}
	other, err := newStoreWithPair(t, f)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Store.DiscardCurrent(other.Leaf); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Store.Current(); err != nil {
		t.Fatalf("DiscardCurrent of another pair removed the current one: %v", err)
	}
	if err := m.Store.DiscardCurrent(pair.Leaf); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Store.Current(); !errors.Is(err, ErrNoCertificate) {
		t.Fatalf("after DiscardCurrent: %v, want ErrNoCertificate (what exec-credential refuses)", err)
	}
	// Once more is a no-op.
	if err := m.Store.DiscardCurrent(pair.Leaf); err != nil {
		t.Fatal(err)
	}
}

func newStoreWithPair(t *testing.T, f *fakeSigner) (*tls.Certificate, error) {
	m, _ := newManager(t, f)
	return m.Once(context.Background())
}

// A revoked certificate is refused with 403 as well; the watch on the
// issuing CA must not give up as it does without permission: the run loop
// bootstraps a new certificate, with which it watches again.
func TestWatchIssuerKeepsTryingWhileRevoked(t *testing.T) {
	var mu sync.Mutex
	gets := 0
	client := fake.NewSimpleClientset()
	client.PrependReactor("get", "signers", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		gets++
		return true, nil, refusedAsRevoked(authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "system:node:n1"}, Verb: "get", ResourceRequest: true,
			APIGroup: certv1alpha1.GroupName, APIVersion: "v1alpha1", Resource: "signers", Name: "x"}, strings.Repeat("cd", 32), "Unspecified")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	WatchIssuer(ctx, func() (clientset.Interface, error) { return client, nil }, DefaultSigner, make(chan struct{}, 1))
	mu.Lock()
	defer mu.Unlock()
	if ctx.Err() == nil || gets < 2 {
		t.Fatalf("gave up after %d attempts (ctx %v)", gets, ctx.Err())
	}
}
