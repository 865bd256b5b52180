package podcert

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
	"rekey.io/rekey/pkg/signing/signingtest"
)

var now = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

const (
	signerName = "rekey.io/podcert-unit"
	ns         = "apps"
)

type memoryRecorder struct {
	mu      sync.Mutex
	records []issuance.Record
}

func (r *memoryRecorder) Record(_ context.Context, rec issuance.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
	return nil
}

type fixture struct {
	kube     *kubefake.Clientset
	recorder *memoryRecorder
	signer   *certv1alpha1.Signer
	ca       *x509.Certificate
	c        *Controller
	pod      *corev1.Pod
	sa       *corev1.ServiceAccount
	node     *corev1.Node
}

// options change the fixture before the controller is built.
type options struct {
	caValidity time.Duration
	policy     func(*certv1alpha1.Signer)
	objects    func(f *fixture)
}

func newFixture(t *testing.T, o options) *fixture {
	t.Helper()
	ctx := context.Background()
	caIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	signerIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	keys := signingtest.NewMemoryKeys()
	bindings := cabinding.NewMemoryStore()
	key, _, err := keys.GetOrCreate(ctx, "pod-ca-01234567-1", signing.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	validity := 30 * 24 * time.Hour
	if o.caValidity != 0 {
		validity = o.caValidity
	}
	caCert, err := signing.NewSelfSignedCA("pod CA", key, validity, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bindings.Create(ctx, &cabinding.Binding{CAName: "pod-ca", CAUID: "0123456789", KeyID: "pod-ca-01234567-1", Certificate: caCert.Raw}); err != nil {
		t.Fatal(err)
	}
	if err := caIndexer.Add(&rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "pod-ca", UID: types.UID("0123456789")},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd}}}); err != nil {
		t.Fatal(err)
	}
	s := &certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: validation.SignerObjectName(signerName)},
		Spec: certv1alpha1.SignerSpec{SignerName: signerName, CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "pod-ca"},
			Policy: certv1alpha1.SignerPolicy{
				AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth, certv1alpha1.UsageServerAuth},
				MaxDuration:   metav1.Duration{Duration: 24 * time.Hour},
				SubjectAltNames: certv1alpha1.SubjectAltNamePolicy{
					Allowed: []certv1alpha1.SubjectAltNameType{certv1alpha1.SANTypeDNS, certv1alpha1.SANTypeURI}},
			},
			HostCluster: &certv1alpha1.HostClusterServing{PodCertificateRequests: &certv1alpha1.PodCertificatePolicy{
				Allowed:           []certv1alpha1.PodCertificateSubjects{{Namespace: ns, ServiceAccounts: []string{"web"}}},
				SPIFFETrustDomain: "td.example",
				CommonName:        "$(serviceAccount).$(namespace)",
				DNSNames:          []string{"$(serviceAccount).$(namespace).svc", "$(podName).pods.example"},
				KeyTypes:          []certv1alpha1.PodCertificateKeyType{certv1alpha1.PodCertificateKeyECDSAP256, certv1alpha1.PodCertificateKeyED25519},
				Duration:          &metav1.Duration{Duration: 8 * time.Hour},
			}},
		}}
	if o.policy != nil {
		o.policy(s)
	}
	if err := signerIndexer.Add(s); err != nil {
		t.Fatal(err)
	}
	f := &fixture{recorder: &memoryRecorder{}, signer: s, ca: caCert,
		node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}},
		sa:   &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, UID: "sa-uid"}},
		pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: ns, UID: "pod-uid"},
			Spec: corev1.PodSpec{NodeName: "n1", ServiceAccountName: "web", Volumes: []corev1.Volume{{Name: "cert",
				VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{PodCertificate: &corev1.PodCertificateProjection{SignerName: signerName, KeyType: "ECDSAP256", CredentialBundlePath: "b.pem"}},
				}}}}}}},
	}
	if o.objects != nil {
		o.objects(f)
	}
	var objs []runtime.Object
	for _, obj := range []runtime.Object{f.node, f.sa, f.pod} {
		if obj != nil && !isNil(obj) {
			objs = append(objs, obj)
		}
	}
	f.kube = kubefake.NewClientset(objs...)
	clk := clocktesting.NewFakePassiveClock(now)
	f.c = &Controller{
		kube:    f.kube,
		signers: certlisters.NewSignerLister(signerIndexer),
		signing: &authority.Signing{Authorities: authority.NewAuthorities(rotationlisters.NewCertificateAuthorityLister(caIndexer),
			&authority.KeyStores{Etcd: keys}, bindings), Recorder: f.recorder, Clock: clk},
		clock: clk,
	}
	return f
}

func isNil(obj runtime.Object) bool {
	switch o := obj.(type) {
	case *corev1.Node:
		return o == nil
	case *corev1.ServiceAccount:
		return o == nil
	case *corev1.Pod:
		return o == nil
	}
	return false
}

func p256(t *testing.T) crypto.Signer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// request is what a kubelet would create for the fixture's pod, stored
// in the fake clientset.
func (f *fixture) request(t *testing.T, key crypto.Signer, change func(*certificatesv1.PodCertificateRequest)) *certificatesv1.PodCertificateRequest {
	t.Helper()
	stub, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "stub"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	pcr := &certificatesv1.PodCertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "req-web-0-1", Namespace: ns, UID: "pcr-uid", Generation: 1},
		Spec: certificatesv1.PodCertificateRequestSpec{
			SignerName: signerName, PodName: "web-0", PodUID: "pod-uid", ServiceAccountName: "web", ServiceAccountUID: "sa-uid",
			NodeName: "n1", NodeUID: "node-uid", MaxExpirationSeconds: ptr.To[int32](86400), StubPKCS10Request: stub,
		},
	}
	if change != nil {
		change(pcr)
	}
	if err := f.kube.Tracker().Add(pcr); err != nil {
		t.Fatal(err)
	}
	return pcr
}

// handle runs Handle and returns the status written, or nil.
func (f *fixture) handle(t *testing.T, pcr *certificatesv1.PodCertificateRequest) *certificatesv1.PodCertificateRequest {
	t.Helper()
	if err := f.c.Handle(context.Background(), pcr); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	var written *certificatesv1.PodCertificateRequest
	for _, a := range f.kube.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetSubresource() == "status" {
			written = u.GetObject().(*certificatesv1.PodCertificateRequest)
		}
	}
	return written
}

func onlyCondition(t *testing.T, pcr *certificatesv1.PodCertificateRequest, typ, reason string) metav1.Condition {
	t.Helper()
	if pcr == nil {
		t.Fatalf("no status written, want %s %s", typ, reason)
	}
	if len(pcr.Status.Conditions) != 1 {
		t.Fatalf("conditions %+v, want one", pcr.Status.Conditions)
	}
	c := pcr.Status.Conditions[0]
	if c.Type != typ || c.Reason != reason || c.Status != metav1.ConditionTrue {
		t.Fatalf("condition %s/%s (%s): %s, want %s/%s True", c.Type, c.Reason, c.Status, c.Message, typ, reason)
	}
	if c.LastTransitionTime.IsZero() || c.ObservedGeneration != 1 {
		t.Errorf("condition lastTransitionTime %v, observedGeneration %d", c.LastTransitionTime, c.ObservedGeneration)
	}
	return c
}

func TestIssued(t *testing.T) {
	for _, tc := range []struct {
		name         string
		key          crypto.Signer
		maxExpiry    int32
		wantLifetime time.Duration
	}{
		{name: "policy duration under maxExpirationSeconds", key: nil, maxExpiry: 86400, wantLifetime: 8 * time.Hour},
		{name: "maxExpirationSeconds under the policy duration", key: nil, maxExpiry: 3600, wantLifetime: time.Hour},
		{name: "ed25519", key: ed25519Key(t), maxExpiry: 86400, wantLifetime: 8 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, options{})
			key := tc.key
			if key == nil {
				key = p256(t)
			}
			pcr := f.request(t, key, func(p *certificatesv1.PodCertificateRequest) { p.Spec.MaxExpirationSeconds = ptr.To(tc.maxExpiry) })
			got := f.handle(t, pcr)
			onlyCondition(t, got, certificatesv1.PodCertificateRequestConditionTypeIssued, ReasonIssued)
			st := got.Status
			block, rest := pem.Decode([]byte(st.CertificateChain))
			if block == nil || len(strings.TrimSpace(string(rest))) != 0 {
				t.Fatalf("chain %q: want the leaf alone (the CA is self-signed)", st.CertificateChain)
			}
			leaf, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			// What kube-apiserver checks on the write.
			if !key.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(leaf.PublicKey) {
				t.Error("the leaf's key is not the stub's")
			}
			if !st.NotBefore.Time.Equal(leaf.NotBefore) || !st.NotAfter.Time.Equal(leaf.NotAfter) {
				t.Errorf("status %s..%s, leaf %s..%s", st.NotBefore, st.NotAfter, leaf.NotBefore, leaf.NotAfter)
			}
			if !leaf.NotBefore.Equal(now.Add(-backdate)) {
				t.Errorf("notBefore %s, want now - %s", leaf.NotBefore, backdate)
			}
			if lifetime := leaf.NotAfter.Sub(leaf.NotBefore); lifetime != tc.wantLifetime {
				t.Errorf("lifetime %s, want %s", lifetime, tc.wantLifetime)
			}
			if r := st.BeginRefreshAt.Time; r.Before(leaf.NotBefore.Add(10*time.Minute)) || r.After(leaf.NotAfter.Add(-10*time.Minute)) {
				t.Errorf("beginRefreshAt %s outside [notBefore+10m, notAfter-10m]", r)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool(f.ca), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("leaf does not verify against the CA: %v", err)
			}
			// What the policy puts in.
			if leaf.Subject.CommonName != "web.apps" {
				t.Errorf("common name %q", leaf.Subject.CommonName)
			}
			if want := []string{"web.apps.svc", "web-0.pods.example"}; !slices.Equal(leaf.DNSNames, want) {
				t.Errorf("DNS names %v, want %v", leaf.DNSNames, want)
			}
			if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://td.example/ns/apps/sa/web" {
				t.Errorf("URIs %v", leaf.URIs)
			}
			if leaf.KeyUsage != x509.KeyUsageDigitalSignature || !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}) {
				t.Errorf("usages %v %v", leaf.KeyUsage, leaf.ExtKeyUsage)
			}
			// Recorded like every issuance.
			if len(f.recorder.records) != 1 {
				t.Fatalf("records %+v", f.recorder.records)
			}
			rec := f.recorder.records[0]
			if rec.CSRName != "pcr:apps/req-web-0-1" || rec.CSRUID != "pcr-uid" || rec.Requester != "system:serviceaccount:apps:web (pod web-0, uid pod-uid)" ||
				rec.SignerName != signerName || rec.CAName != "pod-ca" || !rec.NotAfter.Equal(leaf.NotAfter) {
				t.Errorf("record %+v", rec)
			}
		})
	}
}

func ed25519Key(t *testing.T) crypto.Signer {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pool(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

func TestIdentityMismatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		objects func(f *fixture)
		request func(p *certificatesv1.PodCertificateRequest)
		want    string
	}{
		{name: "pod absent", objects: func(f *fixture) { f.pod = nil }, want: "pod apps/web-0 does not exist"},
		{name: "pod UID", request: func(p *certificatesv1.PodCertificateRequest) { p.Spec.PodUID = "other" }, want: "has UID pod-uid, not spec.podUID other"},
		{name: "pod being deleted", objects: func(f *fixture) {
			f.pod.DeletionTimestamp = ptr.To(metav1.NewTime(now))
			f.pod.Finalizers = []string{"x"}
		}, want: "being deleted"},
		{name: "pod on another node", objects: func(f *fixture) { f.pod.Spec.NodeName = "n2" }, want: `bound to node "n2"`},
		{name: "pod not scheduled", objects: func(f *fixture) { f.pod.Spec.NodeName = "" }, want: `bound to node ""`},
		// A request not made by the pod's node names a pod that asked
		// for no certificate of this signer.
		{name: "pod without the volume", objects: func(f *fixture) { f.pod.Spec.Volumes = nil }, want: "has no podCertificate volume source for signer"},
		{name: "pod with another signer's volume", objects: func(f *fixture) {
			f.pod.Spec.Volumes[0].Projected.Sources[0].PodCertificate.SignerName = "rekey.io/other"
		}, want: "has no podCertificate volume source for signer"},
		{name: "pod of another service account", objects: func(f *fixture) { f.pod.Spec.ServiceAccountName = "db" }, want: `service account "db"`},
		{name: "service account absent", objects: func(f *fixture) { f.sa = nil }, want: "service account apps/web does not exist"},
		{name: "service account UID", request: func(p *certificatesv1.PodCertificateRequest) { p.Spec.ServiceAccountUID = "old" }, want: "not spec.serviceAccountUID old"},
		{name: "node absent", objects: func(f *fixture) { f.node = nil }, want: "node n1 does not exist"},
		{name: "node UID", request: func(p *certificatesv1.PodCertificateRequest) { p.Spec.NodeUID = "old" }, want: "not spec.nodeUID old"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, options{objects: tc.objects})
			got := f.handle(t, f.request(t, p256(t), tc.request))
			c := onlyCondition(t, got, certificatesv1.PodCertificateRequestConditionTypeDenied, ReasonIdentityMismatch)
			if !strings.Contains(c.Message, tc.want) {
				t.Errorf("message %q does not say %q", c.Message, tc.want)
			}
			if got.Status.CertificateChain != "" || got.Status.NotBefore != nil || len(f.recorder.records) != 0 {
				t.Error("a denied request got a certificate")
			}
		})
	}
}

func TestDeniedAndFailed(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       options
		objects    func(f *fixture)
		key        func(t *testing.T) crypto.Signer
		request    func(p *certificatesv1.PodCertificateRequest)
		typ        string
		reason     string
		wantInMsg  string
		wantIssued bool
	}{
		{name: "service account not allowed", opts: options{policy: func(s *certv1alpha1.Signer) {
			s.Spec.HostCluster.PodCertificateRequests.Allowed = []certv1alpha1.PodCertificateSubjects{{Namespace: ns, ServiceAccounts: []string{"db"}}, {Namespace: "other"}}
		}}, typ: certificatesv1.PodCertificateRequestConditionTypeDenied, reason: ReasonNotAllowed, wantInMsg: "apps/web"},
		{name: "every service account of every namespace", opts: options{policy: func(s *certv1alpha1.Signer) {
			s.Spec.HostCluster.PodCertificateRequests.Allowed = []certv1alpha1.PodCertificateSubjects{{Namespace: "*", ServiceAccounts: []string{"*"}}}
		}}, wantIssued: true},
		{name: "unverified user annotations", request: func(p *certificatesv1.PodCertificateRequest) {
			p.Spec.UnverifiedUserAnnotations = map[string]string{"example.com/role": "admin"}
		}, typ: certificatesv1.PodCertificateRequestConditionTypeDenied, reason: ReasonInvalidUnverifiedUserAnnotations},
		{name: "key type not accepted", key: func(t *testing.T) crypto.Signer {
			k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			return k
		}, typ: certificatesv1.PodCertificateRequestConditionTypeDenied, reason: ReasonUnsupportedKeyType, wantInMsg: "not ECDSAP384"},
		{name: "template expands to an invalid DNS name", opts: options{policy: func(s *certv1alpha1.Signer) {
			s.Spec.HostCluster.PodCertificateRequests.DNSNames = []string{"$(podName).$(podName).$(podName).$(podName).example"}
		}}, objects: func(f *fixture) { f.pod.Name = strings.Repeat("p", 63) },
			request: func(p *certificatesv1.PodCertificateRequest) { p.Spec.PodName = strings.Repeat("p", 63) },
			typ:     certificatesv1.PodCertificateRequestConditionTypeFailed, reason: ReasonInvalidTemplate, wantInMsg: "dnsNames[0]"},
		{name: "signer policy refuses a SAN type", opts: options{policy: func(s *certv1alpha1.Signer) {
			s.Spec.Policy.SubjectAltNames.Allowed = []certv1alpha1.SubjectAltNameType{certv1alpha1.SANTypeDNS}
		}}, typ: certificatesv1.PodCertificateRequestConditionTypeFailed, reason: authority.ReasonPolicyViolation, wantInMsg: "URI"},
		{name: "CA expires within the hour", opts: options{caValidity: time.Hour + 30*time.Minute},
			typ: certificatesv1.PodCertificateRequestConditionTypeFailed, reason: authority.ReasonLifetimeTooShort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.objects = tc.objects
			f := newFixture(t, opts)
			key := p256(t)
			if tc.key != nil {
				key = tc.key(t)
			}
			got := f.handle(t, f.request(t, key, tc.request))
			if tc.wantIssued {
				onlyCondition(t, got, certificatesv1.PodCertificateRequestConditionTypeIssued, ReasonIssued)
				return
			}
			c := onlyCondition(t, got, tc.typ, tc.reason)
			if !strings.Contains(c.Message, tc.wantInMsg) {
				t.Errorf("message %q does not say %q", c.Message, tc.wantInMsg)
			}
			if got.Status.CertificateChain != "" || got.Status.NotBefore != nil || got.Status.BeginRefreshAt != nil || len(f.recorder.records) != 0 {
				t.Error("a refused request got a certificate")
			}
		})
	}
}

func TestLeftAlone(t *testing.T) {
	t.Run("finished", func(t *testing.T) {
		f := newFixture(t, options{})
		pcr := f.request(t, p256(t), func(p *certificatesv1.PodCertificateRequest) {
			p.Status.Conditions = []metav1.Condition{{Type: certificatesv1.PodCertificateRequestConditionTypeDenied, Status: metav1.ConditionTrue, Reason: "Other"}}
		})
		if got := f.handle(t, pcr); got != nil {
			t.Errorf("wrote the status of a finished request: %+v", got.Status)
		}
	})
	t.Run("signer does not serve PodCertificateRequests", func(t *testing.T) {
		f := newFixture(t, options{policy: func(s *certv1alpha1.Signer) {
			s.Spec.HostCluster = &certv1alpha1.HostClusterServing{CertificateSigningRequests: true}
		}})
		if got := f.handle(t, f.request(t, p256(t), nil)); got != nil {
			t.Errorf("acted for a signer that does not serve PodCertificateRequests: %+v", got.Status)
		}
	})
	t.Run("no Signer", func(t *testing.T) {
		f := newFixture(t, options{})
		pcr := f.request(t, p256(t), func(p *certificatesv1.PodCertificateRequest) { p.Spec.SignerName = "rekey.io/other" })
		if got := f.handle(t, pcr); got != nil {
			t.Errorf("acted for a signer name no Signer serves: %+v", got.Status)
		}
		for _, a := range f.kube.Actions() {
			if a.GetVerb() == "get" {
				t.Errorf("read %s for a signer name no Signer serves", a.GetResource().Resource)
			}
		}
	})
}

func TestBeginRefreshAt(t *testing.T) {
	nb := now
	for _, tc := range []struct {
		lifetime time.Duration
		want     time.Time
	}{
		{24 * time.Hour, nb.Add(12 * time.Hour)},
		{time.Hour, nb.Add(30 * time.Minute)},
		{15 * time.Minute, nb.Add(5 * time.Minute)}, // under kube's floor: clamped to notAfter-10m
	} {
		if got := BeginRefreshAt(nb, nb.Add(tc.lifetime)); !got.Equal(tc.want) {
			t.Errorf("lifetime %s: %s, want %s", tc.lifetime, got, tc.want)
		}
	}
}

func TestSignersStartAndStopInformers(t *testing.T) {
	c := &Controller{kube: kubefake.NewClientset(), bySigner: map[string]*signerRequests{}}
	serving := &certv1alpha1.Signer{Spec: certv1alpha1.SignerSpec{SignerName: signerName,
		HostCluster: &certv1alpha1.HostClusterServing{PodCertificateRequests: &certv1alpha1.PodCertificatePolicy{}}}}
	c.signerChanged(serving)
	if _, ok := c.bySigner[signerName]; !ok {
		t.Fatal("no informer for a Signer serving PodCertificateRequests")
	}
	plain := serving.DeepCopy()
	plain.Spec.HostCluster = nil
	c.signerChanged(plain)
	if len(c.bySigner) != 0 {
		t.Fatal("an informer left for a Signer that stopped serving PodCertificateRequests")
	}
}

// TestStaleRequeueIssuesOnce: a request handled again from the same
// cached copy (a Signer change or a resync before the informer brought the
// Issued write) is not issued and recorded a second time.
func TestStaleRequeueIssuesOnce(t *testing.T) {
	f := newFixture(t, options{})
	pcr := f.request(t, p256(t), nil)
	onlyCondition(t, f.handle(t, pcr), certificatesv1.PodCertificateRequestConditionTypeIssued, ReasonIssued)
	if err := f.c.Handle(context.Background(), pcr); err != nil {
		t.Fatalf("second Handle: %v", err)
	}
	if n := len(f.recorder.records); n != 1 {
		t.Fatalf("%d issuance records after handling the same copy twice, want 1", n)
	}
}

// TestRefusedIssuanceFails: when kube-apiserver refuses the issued
// certificate (422), the request is Failed instead of issued again and
// again.
func TestRefusedIssuanceFails(t *testing.T) {
	f := newFixture(t, options{})
	pcr := f.request(t, p256(t), nil)
	f.kube.PrependReactor("update", "podcertificaterequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u, ok := a.(k8stesting.UpdateAction)
		if !ok || a.GetSubresource() != "status" {
			return false, nil, nil
		}
		if written := u.GetObject().(*certificatesv1.PodCertificateRequest); written.Status.CertificateChain != "" {
			return true, nil, apierrors.NewInvalid(certificatesv1.SchemeGroupVersion.WithKind("PodCertificateRequest").GroupKind(), pcr.Name,
				field.ErrorList{field.Invalid(field.NewPath("status", "notBefore"), "", "too far from now")})
		}
		return false, nil, nil
	})
	c := onlyCondition(t, f.handle(t, pcr), certificatesv1.PodCertificateRequestConditionTypeFailed, ReasonIssuanceRefused)
	if !strings.Contains(c.Message, "too far from now") {
		t.Errorf("message %q does not say why", c.Message)
	}
}
