package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics/testutil"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/csrwait"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/pkg/signing"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// issue signs key's public key into a client certificate valid from
// notBefore for lifetime.
func issue(t *testing.T, ca *pki.KeyPair, pub any, cn string, notBefore time.Time, lifetime time.Duration) []byte {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}},
		NotBefore: notBefore, NotAfter: notBefore.Add(lifetime), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca.Cert, pub, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return pemCert(der)
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func newCA(t *testing.T) *pki.KeyPair {
	t.Helper()
	ca, err := pki.NewCA("test CA", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// newCAAt is a CA made at now (its NotBefore follows from it).
func newCAAt(t *testing.T, now time.Time) *pki.KeyPair {
	t.Helper()
	key := newKey(t)
	cert, err := signing.NewSelfSignedCA("test CA", key, 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	return &pki.KeyPair{Cert: cert, Key: key}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestStoreKeepsAWholePairAcrossUpdatesAndCrashes(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	now := t0
	s := &Store{Dir: dir, Prefix: PrefixClient, Now: func() time.Time { return now }}
	if _, err := s.Current(); !errors.Is(err, ErrNoCertificate) {
		t.Fatalf("empty store: %v", err)
	}
	k1, k2 := newKey(t), newKey(t)
	if _, err := s.Update(issue(t, ca, &k1.PublicKey, "system:node:a", t0.Add(-time.Minute), time.Hour), k1); err != nil {
		t.Fatal(err)
	}
	cur, err := s.Current()
	if err != nil || !cur.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(&k1.PublicKey) {
		t.Fatalf("current after the first update: %v", err)
	}
	info, err := os.Lstat(s.CurrentPath())
	if err != nil || info.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("current is not a symlink: %v %v", info, err)
	}
	target, _ := os.Readlink(s.CurrentPath())
	if fi, err := os.Stat(filepath.Join(dir, target)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("pair file %s: %v %v", target, fi, err)
	}

	// A crash after the new pair is written and before the swap leaves
	// the old pair current.
	now = now.Add(time.Second)
	crashed := filepath.Join(dir, PrefixClient+"-crashed.pem")
	if err := os.WriteFile(crashed, []byte("half a pa"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cur, err := s.Current(); err != nil || !cur.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(&k1.PublicKey) {
		t.Fatalf("after a crash before the swap: %v", err)
	}
	if _, err := s.Update(issue(t, ca, &k2.PublicKey, "system:node:a", t0.Add(-time.Minute), time.Hour), k2); err != nil {
		t.Fatal(err)
	}
	if cur, err := s.Current(); err != nil || !cur.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(&k2.PublicKey) {
		t.Fatalf("after the second update: %v", err)
	}

	// Expired, not yet valid, corrupt, or a key that is not the
	// certificate's: never used.
	now = t0.Add(2 * time.Hour)
	if _, err := s.Current(); err == nil || !strings.Contains(err.Error(), "not now") {
		t.Fatalf("expired pair used: %v", err)
	}
	if _, err := s.Update(issue(t, ca, &k1.PublicKey, "x", t0, time.Hour), k2); err == nil {
		t.Fatal("stored a pair whose key is not the certificate's")
	}
	now = t0
	target, _ = os.Readlink(s.CurrentPath())
	if err := os.WriteFile(filepath.Join(dir, target), []byte("-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Current(); err == nil {
		t.Fatal("a corrupt pair was used")
	}
}

func TestPendingKeyIsKeptUntilDropped(t *testing.T) {
	s := &Store{Dir: t.TempDir(), Prefix: PrefixClient}
	k1, err := s.PendingKey()
	if err != nil {
		t.Fatal(err)
	}
	k2, err := s.PendingKey()
	if err != nil || !k1.Public().(*ecdsa.PublicKey).Equal(k2.Public()) {
		t.Fatalf("a second call made another key: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(s.Dir, PrefixClient+".key.tmp")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("pending key file: %v %v", fi, err)
	}
	if err := s.DropPendingKey(); err != nil {
		t.Fatal(err)
	}
	k3, err := s.PendingKey()
	if err != nil || k1.Public().(*ecdsa.PublicKey).Equal(k3.Public()) {
		t.Fatalf("after dropping, the same key again: %v", err)
	}
}

func TestRequestName(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	tmpl := ClientTemplate(DefaultSigner, "n1")
	name := func(tm Template, k *ecdsa.PrivateKey) string {
		n, err := tm.RequestName(&k.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a := name(tmpl, k1)
	if a != name(tmpl, k1) || !strings.HasPrefix(a, "node-csr-") {
		t.Fatalf("name %q is not stable", a)
	}
	if a == name(tmpl, k2) {
		t.Error("two keys, one name")
	}
	other := tmpl
	other.SignerName = "example.com/other"
	if a == name(other, k1) {
		t.Error("two signers, one name")
	}
	reordered := tmpl
	reordered.Usages = []certv1alpha1.KeyUsage{tmpl.Usages[2], tmpl.Usages[0], tmpl.Usages[1]}
	if a != name(reordered, k1) {
		t.Error("the order of usages changed the name")
	}
	serving := Template{SignerName: "x/y", Subject: pkix.Name{CommonName: "n"}, IPAddresses: []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("10.0.0.2")}}
	swapped := serving
	swapped.IPAddresses = []net.IP{serving.IPAddresses[1], serving.IPAddresses[0]}
	if name(serving, k1) != name(swapped, k1) {
		t.Error("the order of IP addresses changed the name")
	}
}

const DefaultSigner = "rekey.io/kube-apiserver-client-kubelet"

func TestRotationDeadlineIsBetween70And90Percent(t *testing.T) {
	cert := &x509.Certificate{NotBefore: t0, NotAfter: t0.Add(100 * time.Hour), Raw: []byte("some certificate")}
	for _, tc := range []struct {
		jitter float64
		want   time.Duration
	}{{0, 70 * time.Hour}, {0.5, 80 * time.Hour}, {0.999999999, 90 * time.Hour}, {-1, 70 * time.Hour}, {7, 90 * time.Hour}} {
		got := RotationDeadline(cert, func() float64 { return tc.jitter }).Sub(t0)
		if diff := got - tc.want; diff > time.Second || diff < -time.Second {
			t.Errorf("jitter %v: deadline at %s, want %s", tc.jitter, got, tc.want)
		}
	}
	d := RotationDeadline(cert, nil)
	if !d.Equal(RotationDeadline(cert, nil)) || d.Before(t0.Add(70*time.Hour)) || d.After(t0.Add(90*time.Hour)) {
		t.Fatalf("certificate-derived deadline %s is not stable or not in [70%%, 90%%]", d)
	}
	other := *cert
	other.Raw = []byte("another certificate")
	if RotationDeadline(&other, nil).Equal(d) {
		t.Error("two certificates, one deadline: nodes would renew together")
	}
}

func TestExecCredential(t *testing.T) {
	ca := newCA(t)
	k := newKey(t)
	s := &Store{Dir: t.TempDir(), Prefix: PrefixClient, Now: func() time.Time { return t0 }}
	if _, err := s.Update(issue(t, ca, &k.PublicKey, "system:node:a", t0, 10*time.Hour), k); err != nil {
		t.Fatal(err)
	}
	pair, err := s.Current()
	if err != nil {
		t.Fatal(err)
	}
	decode := func(data []byte) *clientauthv1.ExecCredential {
		var ec clientauthv1.ExecCredential
		if err := json.Unmarshal(data, &ec); err != nil {
			t.Fatal(err)
		}
		return &ec
	}
	data, err := ExecCredential(pair, t0.Add(time.Hour), 0, time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ec := decode(data)
	if ec.APIVersion != "client.authentication.k8s.io/v1" || ec.Kind != "ExecCredential" || ec.Status == nil {
		t.Fatalf("%s", data)
	}
	if _, err := tls.X509KeyPair([]byte(ec.Status.ClientCertificateData), []byte(ec.Status.ClientKeyData)); err != nil {
		t.Fatalf("the credential's pair does not load: %v", err)
	}
	if want := RotationDeadline(pair.Leaf, nil).Truncate(time.Second); !ec.Status.ExpirationTimestamp.Time.Equal(want) {
		t.Errorf("expiration %s, want the renewal deadline %s", ec.Status.ExpirationTimestamp, want)
	}
	// Past the deadline: ask again within ten seconds, never after expiry.
	late := decode(must(ExecCredential(pair, t0.Add(9*time.Hour+59*time.Minute+55*time.Second), 0, time.Time{}, 0)))
	if !late.Status.ExpirationTimestamp.Time.Equal(t0.Add(10 * time.Hour)) {
		t.Errorf("late expiration %s, want the certificate's end", late.Status.ExpirationTimestamp)
	}
	if later := decode(must(ExecCredential(pair, t0.Add(9*time.Hour+30*time.Minute), 0, time.Time{}, 0))); !later.Status.ExpirationTimestamp.Time.Equal(t0.Add(9*time.Hour + 30*time.Minute + 10*time.Second)) {
		t.Errorf("past the deadline: expiration %s, want ten seconds on", later.Status.ExpirationTimestamp)
	}
	// With --renew-before, the deadline run uses.
	early := decode(must(ExecCredential(pair, t0.Add(time.Hour), 8*time.Hour, time.Time{}, 0)))
	if !early.Status.ExpirationTimestamp.Time.Equal(t0.Add(2 * time.Hour)) {
		t.Errorf("with renew-before 8h: expiration %s, want two hours after issue", early.Status.ExpirationTimestamp)
	}
	// A rotation's renewal point that `run` noted: client-go asks again
	// then, so that the kubelet takes the renewed certificate at once.
	point := t0.Add(90 * time.Minute)
	if err := s.SetEarlyRenewal(pair.Leaf, point); err != nil {
		t.Fatal(err)
	}
	if got := s.EarlyRenewal(pair.Leaf); !got.Equal(point) {
		t.Fatalf("noted early renewal %s, want %s", got, point)
	}
	rotating := decode(must(ExecCredential(pair, t0.Add(time.Hour), 0, s.EarlyRenewal(pair.Leaf), 0)))
	if !rotating.Status.ExpirationTimestamp.Time.Equal(point) {
		t.Errorf("with an early renewal noted: expiration %s, want %s", rotating.Status.ExpirationTimestamp, point)
	}
	// --recheck caps the expiration, so that a client that fetched the
	// credential before the rotation asks again soon.
	capped := decode(must(ExecCredential(pair, t0.Add(time.Hour), 0, time.Time{}, time.Minute)))
	if !capped.Status.ExpirationTimestamp.Time.Equal(t0.Add(time.Hour + time.Minute)) {
		t.Errorf("with --recheck 1m: expiration %s, want a minute from now", capped.Status.ExpirationTimestamp)
	}
	// A note for another certificate (renewed since) counts for nothing.
	other := &x509.Certificate{Raw: []byte("another certificate")}
	if got := s.EarlyRenewal(other); !got.IsZero() {
		t.Errorf("a note for another certificate read as %s", got)
	}
	if err := s.SetEarlyRenewal(pair.Leaf, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got := s.EarlyRenewal(pair.Leaf); !got.IsZero() {
		t.Errorf("a removed note read as %s", got)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// fakeSigner answers creates like rekey with NodeClient issuance: the
// create response holds the certificate, unless refuse is set.
type fakeSigner struct {
	t *testing.T
	// mu guards ca, which a test may swap while Run runs.
	mu sync.Mutex
	ca *pki.KeyPair
	// now is the clock certificates are issued by (nil: time.Now).
	now    func() time.Time
	refuse bool
	// pending answers creates with the request undecided.
	pending bool
	creates int
	// paths are the subresources the creates went through ("" for the
	// main resource); refusePaths answers those with 403.
	paths       []string
	refusePaths map[string]bool
}

// setCA makes ca the signing CA from now on.
func (f *fakeSigner) setCA(ca *pki.KeyPair) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ca = ca
}

func (f *fakeSigner) react(action k8stesting.Action) (bool, runtime.Object, error) {
	csr := action.(k8stesting.CreateAction).GetObject().(*certv1alpha1.CertificateSigningRequest).DeepCopy()
	f.paths = append(f.paths, action.GetSubresource())
	if f.refusePaths[action.GetSubresource()] {
		return true, nil, apierrors.NewForbidden(certv1alpha1.Resource("certificatesigningrequests"), csr.Name, errors.New("no permission"))
	}
	f.creates++
	if f.pending {
		return false, csr, nil
	}
	if f.refuse {
		csr.Status.Conditions = []certv1alpha1.CertificateSigningRequestCondition{{Type: certv1alpha1.CertificateDenied, Status: metav1.ConditionTrue, Reason: "NotThisNode", Message: "no"}}
		return false, csr, nil
	}
	req, err := validation.ParseCSR(csr.Spec.Request)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	ca := f.ca
	f.mu.Unlock()
	now := time.Now()
	if f.now != nil {
		now = f.now()
	}
	csr.Status.Certificate = issue(f.t, ca, req.PublicKey, req.Subject.CommonName, now.Add(-time.Minute), time.Hour)
	return false, csr, nil
}

func newManager(t *testing.T, f *fakeSigner) (*Manager, *fake.Clientset) {
	client := fake.NewSimpleClientset()
	client.PrependReactor("create", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		_, obj, err := f.react(a)
		if err != nil {
			return true, nil, err
		}
		// Store what the server would, and answer with it.
		if err := client.Tracker().Create(certv1alpha1.SchemeGroupVersion.WithResource("certificatesigningrequests"), obj, ""); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	})
	m := &Manager{
		Store:       &Store{Dir: t.TempDir(), Prefix: PrefixClient},
		Template:    ClientTemplate(DefaultSigner, "n1"),
		NewClient:   func(*tls.Certificate) (clientset.Interface, error) { return client, nil },
		WaitTimeout: 5 * time.Second,
	}
	return m, client
}

func TestOnceBootstrapsThenDoesNothingUntilDue(t *testing.T) {
	f := &fakeSigner{t: t, ca: newCA(t)}
	m, client := newManager(t, f)
	pair, err := m.Once(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if pair.Leaf.Subject.CommonName != "system:node:n1" || f.creates != 1 {
		t.Fatalf("bootstrapped %v after %d creates", pair.Leaf.Subject, f.creates)
	}
	if _, err := os.Stat(m.Store.pendingKeyPath()); !os.IsNotExist(err) {
		t.Errorf("the pending key outlived its certificate: %v", err)
	}
	client.ClearActions()
	if _, err := m.Once(context.Background()); err != nil || len(client.Actions()) != 0 || f.creates != 1 {
		t.Fatalf("a second run before the deadline: err %v, actions %v", err, client.Actions())
	}
	// A template change (another node name) renews at once.
	m.Template = ClientTemplate(DefaultSigner, "n2")
	if pair, err := m.Once(context.Background()); err != nil || pair.Leaf.Subject.CommonName != "system:node:n2" || f.creates != 2 {
		t.Fatalf("after a template change: %v, %d creates", err, f.creates)
	}
}

// TestNodeClientPaths: a node client request goes through nodeclient at
// bootstrap and selfnodeclient when renewing; where the server refuses
// that path, the plain create follows.
func TestNodeClientPaths(t *testing.T) {
	f := &fakeSigner{t: t, ca: newCA(t)}
	m, _ := newManager(t, f)
	if _, err := m.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.RenewBefore = 2 * time.Hour // the fake's certificates live an hour: due at once
	if _, err := m.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"nodeclient", "selfnodeclient"}; !slices.Equal(f.paths, want) {
		t.Fatalf("paths %q, want %q", f.paths, want)
	}

	f = &fakeSigner{t: t, ca: newCA(t), refusePaths: map[string]bool{"nodeclient": true}}
	m, _ = newManager(t, f)
	if pair, err := m.Once(context.Background()); err != nil || pair.Leaf.Subject.CommonName != "system:node:n1" {
		t.Fatalf("after the refused path: %v", err)
	}
	if want := []string{"nodeclient", ""}; !slices.Equal(f.paths, want) {
		t.Fatalf("paths %q, want %q", f.paths, want)
	}
}

// A request not decided at create is watched until it is: issued, or
// deleted (the wait ends then, not at WaitTimeout).
func TestOnceWatchesAnUndecidedRequest(t *testing.T) {
	csrs := certv1alpha1.SchemeGroupVersion.WithResource("certificatesigningrequests")
	for name, tc := range map[string]struct {
		// decide is what happens to the request once the agent watches it.
		decide func(f *fakeSigner, client *fake.Clientset, csr *certv1alpha1.CertificateSigningRequest) error
		check  func(*tls.Certificate, error) bool
	}{
		"issued": {
			decide: func(f *fakeSigner, client *fake.Clientset, csr *certv1alpha1.CertificateSigningRequest) error {
				req, err := validation.ParseCSR(csr.Spec.Request)
				if err != nil {
					return err
				}
				csr.Status.Certificate = issue(t, f.ca, req.PublicKey, req.Subject.CommonName, time.Now().Add(-time.Minute), time.Hour)
				return client.Tracker().Update(csrs, csr, "")
			},
			check: func(pair *tls.Certificate, err error) bool {
				return err == nil && pair.Leaf.Subject.CommonName == "system:node:n1"
			},
		},
		"deleted": {
			decide: func(_ *fakeSigner, client *fake.Clientset, csr *certv1alpha1.CertificateSigningRequest) error {
				return client.Tracker().Delete(csrs, "", csr.Name)
			},
			check: func(_ *tls.Certificate, err error) bool { return errors.Is(err, csrwait.ErrGone) },
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeSigner{t: t, ca: newCA(t), pending: true}
			m, client := newManager(t, f)
			m.WaitTimeout = time.Minute
			client.PrependWatchReactor("certificatesigningrequests", func(action k8stesting.Action) (bool, watch.Interface, error) {
				w, err := client.Tracker().Watch(csrs, action.GetNamespace())
				if err != nil {
					return true, nil, err
				}
				list, err := client.Tracker().List(csrs, certv1alpha1.SchemeGroupVersion.WithKind("CertificateSigningRequest"), "")
				if err != nil {
					return true, nil, err
				}
				for _, csr := range list.(*certv1alpha1.CertificateSigningRequestList).Items {
					if err := tc.decide(f, client, csr.DeepCopy()); err != nil {
						return true, nil, err
					}
				}
				return true, w, nil
			})
			pair, err := m.Once(context.Background())
			if !tc.check(pair, err) {
				t.Fatalf("unexpected outcome: %v", err)
			}
		})
	}
}

func TestOnceAfterARestartFindsTheSameRequest(t *testing.T) {
	f := &fakeSigner{t: t, ca: newCA(t)}
	m, client := newManager(t, f)
	// The agent made its key and request, then died before the
	// certificate came: the request is there, issued meanwhile.
	key, err := m.Store.PendingKey()
	if err != nil {
		t.Fatal(err)
	}
	name, _ := m.Template.RequestName(key.Public())
	request, _ := m.Template.CSR(key)
	issued := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1alpha1.CertificateSigningRequestSpec{Request: request, SignerName: DefaultSigner, Usages: m.Template.Usages}}
	issued.Status.Certificate = issue(t, f.ca, key.Public(), "system:node:n1", time.Now().Add(-time.Minute), time.Hour)
	if err := client.Tracker().Add(issued); err != nil {
		t.Fatal(err)
	}
	pair, err := m.Once(context.Background())
	if err != nil || f.creates != 0 || !pair.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(key.Public()) {
		t.Fatalf("restart: %v, %d creates", err, f.creates)
	}
}

func TestOnceReportsARefusalAndForgetsTheKey(t *testing.T) {
	f := &fakeSigner{t: t, ca: newCA(t), refuse: true}
	m, _ := newManager(t, f)
	key, _ := m.Store.PendingKey()
	_, err := m.Once(context.Background())
	var refusal *Refusal
	if !errors.As(err, &refusal) || refusal.Reason != "NotThisNode" || refusal.Condition != "Denied" {
		t.Fatalf("err %v, want the denial with its reason", err)
	}
	next, _ := m.Store.PendingKey()
	if next.Public().(*ecdsa.PublicKey).Equal(key.Public()) {
		t.Fatal("the refused key is asked for again")
	}
}

func TestServingRequestCarriesTheNodeAddresses(t *testing.T) {
	f := &fakeSigner{t: t, ca: newCA(t)}
	m, client := newManager(t, f)
	m.Store.Prefix = PrefixServer
	m.Template = ServingTemplate("rekey.io/kubelet-serving", "n1", []string{"n1.example.com"}, []net.IP{net.ParseIP("10.0.0.7")})
	if _, err := m.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	var created *certv1alpha1.CertificateSigningRequest
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" {
			created = a.(k8stesting.CreateAction).GetObject().(*certv1alpha1.CertificateSigningRequest)
		}
	}
	req, err := validation.ParseCSR(created.Spec.Request)
	if err != nil {
		t.Fatal(err)
	}
	if created.Spec.SignerName != "rekey.io/kubelet-serving" || len(req.DNSNames) != 1 || req.DNSNames[0] != "n1.example.com" ||
		len(req.IPAddresses) != 1 || !req.IPAddresses[0].Equal(net.ParseIP("10.0.0.7")) {
		t.Fatalf("serving request: signer %s, SANs %v %v", created.Spec.SignerName, req.DNSNames, req.IPAddresses)
	}
	hasServerAuth := false
	for _, u := range created.Spec.Usages {
		hasServerAuth = hasServerAuth || u == certv1alpha1.UsageServerAuth
	}
	if !hasServerAuth {
		t.Errorf("usages %v", created.Spec.Usages)
	}
	if _, err := os.Lstat(filepath.Join(m.Store.Dir, "rekey-server-current.pem")); err != nil {
		t.Fatal(err)
	}
}

func TestMetricsCountRenewalsAndRefusals(t *testing.T) {
	RegisterMetrics()
	f := &fakeSigner{t: t, ca: newCA(t)}
	m, _ := newManager(t, f)
	m.Store.Prefix = "metrics-test"
	if _, err := m.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v, err := testutil.GetCounterMetricValue(renewals.WithLabelValues("metrics-test")); err != nil || v != 1 {
		t.Fatalf("renewals = %v, %v", v, err)
	}
	if v, err := testutil.GetGaugeMetricValue(expirationSeconds.WithLabelValues("metrics-test")); err != nil || v < 3500 || v > 3600 {
		t.Fatalf("expiration gauge = %v, %v, want about an hour", v, err)
	}
	f.refuse = true
	m.Template = ClientTemplate(DefaultSigner, "other")
	if _, err := m.Once(context.Background()); err == nil {
		t.Fatal("refused request reported no error")
	}
	if v, err := testutil.GetCounterMetricValue(renewalErrors.WithLabelValues("metrics-test", "denied")); err != nil || v != 1 {
		t.Fatalf("denied errors = %v, %v", v, err)
	}
}

// caObjects returns the Signer and CA objects of DefaultSigner, the CA in
// phase with current as its signing certificate.
func caObjects(phase rotationv1alpha1.RotationPhase, current *pki.KeyPair, bundle ...*pki.KeyPair) []runtime.Object {
	signer := &certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: validation.SignerObjectName(DefaultSigner)},
		Spec: certv1alpha1.SignerSpec{SignerName: DefaultSigner, CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "kubelet-ca"}}}
	ca := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "kubelet-ca"}}
	ca.Status.Phase = phase
	ca.Status.Current = &rotationv1alpha1.CACertificate{Certificate: string(current.CertPEM())}
	for _, b := range bundle {
		ca.Status.TrustBundle += string(b.CertPEM())
	}
	return []runtime.Object{signer, ca}
}

// prepared puts a CA of caObjects in Prepared at prepared (nil: not
// said) with the renewal window window (nil: not set).
func prepared(objects []runtime.Object, at *time.Time, window *time.Duration) []runtime.Object {
	ca := objects[1].(*rotationv1alpha1.CertificateAuthority)
	ca.Status.Phase = rotationv1alpha1.PhasePrepared
	if at != nil {
		ca.Status.LastInitiationFinishedTime = &metav1.Time{Time: *at}
	}
	if window != nil {
		ca.Spec.Rotation = &rotationv1alpha1.RotationPolicy{RenewalWindow: &metav1.Duration{Duration: *window}}
	}
	return objects
}

func TestIssuerRotating(t *testing.T) {
	oldCA, freshCA := newCA(t), newCA(t)
	k := newKey(t)
	leafPEM := issue(t, oldCA, &k.PublicKey, "system:node:n1", time.Now().Add(-time.Minute), time.Hour)
	leaf, err := validation.ParseCertificateChain(leafPEM)
	if err != nil {
		t.Fatal(err)
	}
	at, window, zero := t0, 10*time.Minute, time.Duration(0)
	point := RenewalPoint(leaf[0], at, window)
	if point.Before(at) || !point.Before(at.Add(window)) {
		t.Fatalf("renewal point %s outside [%s, %s)", point, at, at.Add(window))
	}
	type want struct {
		renew bool
		at    time.Time
	}
	tests := map[string]struct {
		objects []runtime.Object
		want    want
		unknown bool
	}{
		"no rotation":                {objects: caObjects(rotationv1alpha1.PhaseNone, oldCA)},
		"in the bundle, no rotation": {objects: caObjects(rotationv1alpha1.PhaseNone, oldCA, oldCA)},
		"another signer's CA":        {objects: caObjects(rotationv1alpha1.PhaseNone, freshCA, freshCA), want: want{renew: true}},
		// The old CA still signs while the new one is made trusted.
		"preparing":                     {objects: caObjects(rotationv1alpha1.PhasePreparing, oldCA, oldCA, freshCA)},
		"prepared, new key signs":       {objects: prepared(caObjects(rotationv1alpha1.PhasePrepared, freshCA), &at, &window), want: want{renew: true, at: point}},
		"prepared, window 0":            {objects: prepared(caObjects(rotationv1alpha1.PhasePrepared, freshCA), &at, &zero), want: want{renew: true}},
		"prepared, window not set":      {objects: prepared(caObjects(rotationv1alpha1.PhasePrepared, freshCA), &at, nil), want: want{renew: true}},
		"prepared, time not set":        {objects: prepared(caObjects(rotationv1alpha1.PhasePrepared, freshCA), nil, &window), want: want{renew: true}},
		"prepared, already renewed":     {objects: prepared(caObjects(rotationv1alpha1.PhasePrepared, oldCA), &at, &window)},
		"completing, new key":           {objects: caObjects(rotationv1alpha1.PhaseCompleting, freshCA), want: want{renew: true}},
		"completed":                     {objects: caObjects(rotationv1alpha1.PhaseCompleted, freshCA)},
		"signer not readable (missing)": {unknown: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			client := fake.NewSimpleClientset(tc.objects...)
			got, known, err := IssuerRotating(context.Background(), client, DefaultSigner, leaf[0])
			if err != nil || known == tc.unknown || (got != nil) != tc.want.renew {
				t.Fatalf("early renewal %+v (known %v), %v; want renewal %v", got, known, err, tc.want.renew)
			}
			if got != nil && (!got.At.Equal(tc.want.at) || !strings.Contains(got.Reason, "kubelet-ca")) {
				t.Fatalf("renewal at %s (%q), want at %s", got.At, got.Reason, tc.want.at)
			}
		})
	}
	forbidden := fake.NewSimpleClientset()
	forbidden.PrependReactor("get", "signers", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(certv1alpha1.Resource("signers"), "x", errors.New("no"))
	})
	if got, known, err := IssuerRotating(context.Background(), forbidden, DefaultSigner, leaf[0]); got != nil || known || err != nil {
		t.Fatalf("without permission: %v %v %v, want no renewal, not known and no error", got, known, err)
	}
}

// A certificate that is not due is renewed before its deadline when its
// CA rotates, at the point the check names: not before, at once after.
func TestOnceRenewsEarlyWhenTheIssuerRotates(t *testing.T) {
	RegisterMetrics() // unregistered metrics record nothing
	f := &fakeSigner{t: t, ca: newCA(t)}
	m, _ := newManager(t, f)
	now := time.Now()
	m.Store.Now = func() time.Time { return now }
	pair, err := m.Once(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var early *EarlyRenewal
	m.CheckIssuer = func(context.Context, clientset.Interface, *x509.Certificate) (*EarlyRenewal, error) {
		return early, nil
	}
	if _, err := m.Once(context.Background()); err != nil || f.creates != 1 {
		t.Fatalf("not rotating: %v, %d creates", err, f.creates)
	}
	if next := m.NextLook(pair.Leaf); !next.Equal(m.Deadline(pair.Leaf)) {
		t.Fatalf("not rotating: next look %s, want the deadline %s", next, m.Deadline(pair.Leaf))
	}
	point := now.Add(5 * time.Minute)
	early = &EarlyRenewal{At: point, Reason: "CA rotating"}
	if _, err := m.Once(context.Background()); err != nil || f.creates != 1 {
		t.Fatalf("before the renewal point: %v, %d creates, want none", err, f.creates)
	}
	if next := m.NextLook(pair.Leaf); !next.Equal(point) {
		t.Fatalf("next look %s, want the renewal point %s", next, point)
	}
	if v, err := testutil.GetGaugeMetricValue(earlyRenewalTime.WithLabelValues(m.Store.Prefix)); err != nil || v != float64(point.Unix()) {
		t.Fatalf("early renewal gauge %v, %v; want %d", v, err, point.Unix())
	}
	if noted := m.Store.EarlyRenewal(pair.Leaf); !noted.Equal(point) {
		t.Fatalf("exec-credential reads %s, want the renewal point %s", noted, point)
	}
	now = point
	renewed, err := m.Once(context.Background())
	if err != nil || f.creates != 2 {
		t.Fatalf("at the renewal point: %v, %d creates, want a renewal", err, f.creates)
	}
	if _, err := os.Stat(m.Store.earlyPath()); !os.IsNotExist(err) || !m.Store.EarlyRenewal(renewed.Leaf).IsZero() {
		t.Fatalf("the early renewal note outlived its certificate: %v", err)
	}
	early = &EarlyRenewal{Reason: "at once"}
	if _, err := m.Once(context.Background()); err != nil || f.creates != 3 {
		t.Fatalf("at once: %v, %d creates, want a renewal", err, f.creates)
	}
}

// The renewal points of many certificates spread evenly over the window:
// 5,000 nodes renewing after one rotation do not arrive in one second.
func TestRenewalPointsSpreadOverTheWindow(t *testing.T) {
	const nodes, buckets = 5000, 60
	window := 10 * time.Minute
	var counts [buckets]int
	for range nodes {
		raw := make([]byte, 300)
		if _, err := rand.Read(raw); err != nil {
			t.Fatal(err)
		}
		leaf := &x509.Certificate{Raw: raw}
		at := RenewalPoint(leaf, t0, window)
		if at.Before(t0) || !at.Before(t0.Add(window)) {
			t.Fatalf("point %s outside the window", at)
		}
		if again := RenewalPoint(leaf, t0, window); !again.Equal(at) {
			t.Fatalf("the point moved from %s to %s: a restart would draw another", at, again)
		}
		counts[at.Sub(t0)*buckets/window]++
	}
	mean := nodes / buckets
	if peak := slices.Max(counts[:]); peak > 3*mean {
		t.Fatalf("peak bucket %d, more than 3x the mean %d: %v", peak, mean, counts)
	}
	if empty := slices.Min(counts[:]); empty == 0 {
		t.Fatalf("an empty bucket: %v", counts)
	}
	if at := RenewalPoint(&x509.Certificate{Raw: []byte("x")}, time.Time{}, window); !at.IsZero() {
		t.Errorf("without the Prepared time: %s, want at once", at)
	}
	if at := RenewalPoint(&x509.Certificate{Raw: []byte("x")}, t0, 0); !at.IsZero() {
		t.Errorf("window 0: %s, want at once", at)
	}
}

// A crash during the swap leaves the temporary link and maybe a partial
// pair file behind: the current pair is still whole, and the next update
// replaces the leftovers.
func TestStoreSurvivesACrashDuringTheSwap(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	s := &Store{Dir: dir, Prefix: PrefixClient}
	k1, k2 := newKey(t), newKey(t)
	if _, err := s.Update(issue(t, ca, &k1.PublicKey, "system:node:a", time.Now().Add(-time.Minute), time.Hour), k1); err != nil {
		t.Fatal(err)
	}
	// The crashed update: a partial file and the new link not renamed yet.
	if err := os.WriteFile(filepath.Join(dir, PrefixClient+"-9999.pem.partial"), []byte("-----BEGIN CERT"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(PrefixClient+"-9999.pem", s.CurrentPath()+".tmp"); err != nil {
		t.Fatal(err)
	}
	if cur, err := s.Current(); err != nil || !cur.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(&k1.PublicKey) {
		t.Fatalf("after a crash during the swap: %v", err)
	}
	if _, err := s.Update(issue(t, ca, &k2.PublicKey, "system:node:a", time.Now().Add(-time.Minute), time.Hour), k2); err != nil {
		t.Fatalf("the update after the crash: %v", err)
	}
	if cur, err := s.Current(); err != nil || !cur.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(&k2.PublicKey) {
		t.Fatalf("after the next update: %v", err)
	}
}

func TestRenewBeforeBringsTheDeadlineForward(t *testing.T) {
	cert := &x509.Certificate{NotBefore: t0, NotAfter: t0.Add(100 * time.Hour), Raw: []byte("c")}
	m := &Manager{Jitter: func() float64 { return 0.5 }}
	if d := m.Deadline(cert); !d.Equal(t0.Add(80 * time.Hour)) {
		t.Fatalf("deadline %s", d)
	}
	m.RenewBefore = 30 * time.Hour
	if d := m.Deadline(cert); !d.Equal(t0.Add(70 * time.Hour)) {
		t.Fatalf("with renew-before 30h: %s, want 70h", d)
	}
	m.RenewBefore = time.Hour
	if d := m.Deadline(cert); !d.Equal(t0.Add(80 * time.Hour)) {
		t.Fatalf("a renew-before later than the deadline moved it: %s", d)
	}
}

func TestTrustBundleRotating(t *testing.T) {
	oldCA := newCA(t)
	freshCA := newCAAt(t, time.Now().Add(time.Hour)) // a later NotBefore
	k := newKey(t)
	issued := time.Now().Add(-time.Minute)
	leaf, err := validation.ParseCertificateChain(issue(t, oldCA, &k.PublicKey, "system:node:n1", issued.Add(-signing.Backdate), 2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "ca.crt")
	later, earlier := issued.Add(time.Minute), issued.Add(-time.Minute)
	type want struct {
		renew bool
		at    time.Time
	}
	for name, tc := range map[string]struct {
		pem     []byte
		changed time.Time
		want    want
	}{
		"only the issuer": {oldCA.CertPEM(), later, want{}},
		// Preparing: the old CA, which still signs, first. Renewing would
		// be signed by it again.
		"issuer first, a newer CA after": {append(oldCA.CertPEM(), freshCA.CertPEM()...), later, want{}},
		// Prepared: the new CA signs, inside the default window from the
		// bundle's change.
		"a newer CA first": {append(freshCA.CertPEM(), oldCA.CertPEM()...), later,
			want{true, RenewalPoint(leaf[0], later, rotationv1alpha1.DefaultRenewalWindow)}},
		"only a CA that did not": {freshCA.CertPEM(), later, want{renew: true}},
		// The certificate was issued after the bundle was written: a
		// renewal because of this bundle gave it, or could only repeat it.
		"a newer CA first, the certificate newer than the file": {append(freshCA.CertPEM(), oldCA.CertPEM()...), earlier, want{}},
		"only a CA that did not, the certificate newer":         {freshCA.CertPEM(), earlier, want{}},
	} {
		if err := os.WriteFile(bundle, tc.pem, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(bundle, tc.changed, tc.changed); err != nil {
			t.Fatal(err)
		}
		got, err := TrustBundleRotating(bundle, leaf[0])
		if err != nil || (got != nil) != tc.want.renew || got != nil && !got.At.Equal(tc.want.at) {
			t.Errorf("%s: %+v %v, want renewal %v at %s", name, got, err, tc.want.renew, tc.want.at)
		}
	}
	if _, err := TrustBundleRotating(filepath.Join(t.TempDir(), "missing"), leaf[0]); err == nil {
		t.Error("a missing bundle is not an error")
	}
}

// Through a whole rotation read from a bundle file (Preparing, then
// Prepared), the agent renews once per change of the file at most, and
// only when the bundle puts a newer CA first: never in a loop, even with
// a server that keeps signing with the old CA.
func TestTrustBundleRotationNeverLoops(t *testing.T) {
	oldCA := newCAAt(t, time.Now().Add(-time.Hour))
	freshCA := newCAAt(t, time.Now())
	now := time.Now()
	clock := func() time.Time { return now }
	f := &fakeSigner{t: t, ca: oldCA, now: clock}
	m, _ := newManager(t, f)
	m.Store.Now = clock
	bundle := filepath.Join(t.TempDir(), "ca.crt")
	write := func(pem []byte) {
		t.Helper()
		if err := os.WriteFile(bundle, pem, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(bundle, now, now); err != nil {
			t.Fatal(err)
		}
	}
	m.CheckIssuer = func(_ context.Context, _ clientset.Interface, leaf *x509.Certificate) (*EarlyRenewal, error) {
		return TrustBundleRotating(bundle, leaf)
	}
	// The fake signer backdates by one minute, rekey's by signing.Backdate
	// (5): a certificate issued now looks issued 4 minutes later. Steps
	// of 5 minutes keep that from mattering.
	step := func() { now = now.Add(5 * time.Minute) }
	looks := func(what string, creates int) {
		t.Helper()
		for range 3 {
			if _, err := m.Once(context.Background()); err != nil || f.creates != creates {
				t.Fatalf("%s: %v, %d creates, want %d", what, err, f.creates, creates)
			}
			step()
		}
	}
	write(oldCA.CertPEM())
	step()
	looks("bootstrap", 1)
	write(append(oldCA.CertPEM(), freshCA.CertPEM()...)) // Preparing
	step()
	looks("preparing", 1)
	// Prepared, but the server still signs with the old CA: one renewal,
	// inside the window, then none while the file stays.
	write(append(freshCA.CertPEM(), oldCA.CertPEM()...))
	now = now.Add(rotationv1alpha1.DefaultRenewalWindow)
	looks("the server behind the bundle", 2)
	// The file changes again and the new CA signs: one more renewal, into it.
	f.setCA(freshCA)
	write(append(freshCA.CertPEM(), oldCA.CertPEM()...))
	now = now.Add(rotationv1alpha1.DefaultRenewalWindow)
	looks("prepared", 3)
	if pair, err := m.Store.Current(); err != nil || pair.Leaf.CheckSignatureFrom(freshCA.Cert) != nil {
		t.Fatalf("not renewed into the new CA: %v", err)
	}
}

func TestWatchIssuerWakesOnACAChange(t *testing.T) {
	objects := caObjects(rotationv1alpha1.PhaseNone, newCA(t))
	client := fake.NewSimpleClientset(objects...)
	watching := make(chan struct{}, 10)
	client.PrependWatchReactor("certificateauthorities", func(action k8stesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(rotationv1alpha1.SchemeGroupVersion.WithResource("certificateauthorities"), action.GetNamespace())
		watching <- struct{}{}
		return true, w, err
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake := make(chan struct{}, 1)
	go WatchIssuer(ctx, func() (clientset.Interface, error) { return client, nil }, DefaultSigner, wake)
	within := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal(what)
		}
	}
	within("the CA is not watched", watching)
	// Once watching, the agent looks at once (the CA may have changed
	// while nothing watched it).
	within("no look when the watch started", wake)
	ca := objects[1].(*rotationv1alpha1.CertificateAuthority).DeepCopy()
	// A write of counts only (what most writes of a rotating CA are) does
	// not wake the agent; a change of phase does.
	ca.Status.PendingRenewal = 40
	if _, err := client.RotationV1alpha1().CertificateAuthorities().UpdateStatus(ctx, ca, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Held through a window: no wake.
	select {
	case <-wake:
		t.Fatal("a count-only write of the CA woke the agent")
	case <-time.After(500 * time.Millisecond):
	}
	ca.Status.Phase = rotationv1alpha1.PhasePreparing
	if _, err := client.RotationV1alpha1().CertificateAuthorities().UpdateStatus(ctx, ca, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	within("not woken by the CA's change", wake)
}

func TestWatchIssuerStopsWithoutPermission(t *testing.T) {
	client := fake.NewSimpleClientset()
	client.PrependReactor("get", "signers", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(certv1alpha1.Resource("signers"), "x", errors.New("no"))
	})
	done := make(chan struct{})
	go func() {
		WatchIssuer(context.Background(), func() (clientset.Interface, error) { return client, nil }, DefaultSigner, make(chan struct{}, 1))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("kept trying without permission")
	}
}
