package servingcert

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	rekeyfake "rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	rotationinformers "rekey.io/rekey/pkg/generated/informers/externalversions/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
	"rekey.io/rekey/pkg/signing/signingtest"
)

type countingListener struct{ n int }

func (l *countingListener) Enqueue() { l.n++ }

type memoryRecords struct {
	records []issuance.Record
	// refuse, when set, is the error of the next Record (nothing stored).
	refuse error
}

func (m *memoryRecords) Record(_ context.Context, r issuance.Record) error {
	if err := m.refuse; err != nil {
		m.refuse = nil
		return err
	}
	m.records = append(m.records, r)
	return nil
}

func TestProviderSwapsAndNotifies(t *testing.T) {
	first, err := pki.NewCA("first", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	key, err := first.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	p := NewProvider(first.CertPEM(), key)
	l := &countingListener{}
	p.AddListener(l)
	if p.Certificate() == nil || p.Certificate().Subject.CommonName != "first" {
		t.Fatal("the start-up certificate is not served")
	}
	second, err := pki.NewCA("second", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p.Set(second.CertPEM(), key)
	cert, _ := p.CurrentCertKeyContent()
	if l.n != 1 || string(cert) != string(second.CertPEM()) || p.Certificate().Subject.CommonName != "second" {
		t.Fatalf("swap: listener called %d times, serving %s", l.n, p.Certificate().Subject.CommonName)
	}
}

const apiServiceName = "v1alpha1.certificates.rekey.io"

// fixture is a manager on fake clients: rekey's (the CA) and the host
// cluster's (one APIService), with the informers started and synced.
type fixture struct {
	m        *Manager
	rekey    *rekeyfake.Clientset
	kube     *dynamicfake.FakeDynamicClient
	caCert   *x509.Certificate
	caPEM    string
	provider *Provider
	records  *memoryRecords
	now      time.Time
	keys     *signingtest.MemoryKeys
	bindings *cabinding.MemoryStore
}

// newFixture starts the informers of a manager; ca (nil for none) is the
// serving CA, signed by a key bound for it; apiService (nil for none) is
// the APIService's object.
func newFixture(t *testing.T, withCA bool, apiService *unstructured.Unstructured) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := &fixture{records: &memoryRecords{}, now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	keys := signingtest.NewMemoryKeys()
	bindings := cabinding.NewMemoryStore()
	f.keys, f.bindings = keys, bindings
	caKey, _, err := keys.GetOrCreate(ctx, "serving-1", signing.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	if f.caCert, err = signing.NewSelfSignedCA("serving", caKey, 365*24*time.Hour, f.now); err != nil {
		t.Fatal(err)
	}
	if _, err := bindings.Create(ctx, &cabinding.Binding{CAName: "serving", CAUID: "u", KeyID: "serving-1", Certificate: f.caCert.Raw}); err != nil {
		t.Fatal(err)
	}
	f.caPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.caCert.Raw}))
	var rekeyObjects []runtime.Object
	if withCA {
		rekeyObjects = append(rekeyObjects, &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "serving", UID: "u"},
			Spec: rotationv1alpha1.CertificateAuthoritySpec{KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd}},
			Status: rotationv1alpha1.CertificateAuthorityStatus{Current: &rotationv1alpha1.CACertificate{Certificate: f.caPEM, Fingerprint: signing.Fingerprint(f.caCert), KeyID: "serving-1"},
				TrustBundle: f.caPEM}})
	}
	f.rekey = rekeyfake.NewSimpleClientset(rekeyObjects...)
	var kubeObjects []runtime.Object
	if apiService != nil {
		kubeObjects = append(kubeObjects, apiService)
	}
	f.kube = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{apiServices: "APIServiceList"}, kubeObjects...)

	startup, err := pki.NewCA("startup", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	startupKey, err := startup.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	f.provider = NewProvider(startup.CertPEM(), startupKey)
	factory := informers.NewSharedInformerFactory(f.rekey, 0)
	cas := factory.Rotation().V1alpha1().CertificateAuthorities()
	f.m = New(Config{CAName: "serving", Hosts: []string{"rekey-apiserver.rekey-system.svc", "127.0.0.1"}, APIServices: []string{apiServiceName},
		Validity: 30 * 24 * time.Hour, Provider: f.provider}, Deps{
		Replica: "host-a", Authorities: authority.NewAuthorities(cas.Lister(), &authority.KeyStores{Etcd: keys}, bindings), Records: f.records,
		CAs: cas, Client: f.rekey, APIServices: f.kube, Clock: clocktesting.NewFakePassiveClock(f.now),
	})
	factory.Start(ctx.Done())
	synced := []cache.InformerSynced{cas.Informer().HasSynced}
	for _, inf := range f.m.apiServiceInformers {
		go inf.RunWithContext(ctx)
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		t.Fatal("informers not synced")
	}
	return f
}

func apiServiceWithBundle(bundle string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": apiServiceName},
		"spec":     map[string]any{"caBundle": base64.StdEncoding.EncodeToString([]byte(bundle))},
	}}
}

// cachedBundle is the APIService's caBundle as the manager's informer has it.
func (f *fixture) cachedBundle() string {
	obj, ok, _ := f.m.apiServiceInformers[apiServiceName].GetStore().GetByKey(apiServiceName)
	if !ok {
		return ""
	}
	encoded, _, _ := unstructured.NestedString(obj.(*unstructured.Unstructured).Object, "spec", "caBundle")
	bundle, _ := base64.StdEncoding.DecodeString(encoded)
	return string(bundle)
}

// actions are the requests both fake clients received, but the informers'
// lists and watches.
func (f *fixture) actions() []string {
	var out []string
	for _, a := range append(f.rekey.Actions(), f.kube.Actions()...) {
		if a.GetVerb() != "list" && a.GetVerb() != "watch" {
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
		}
	}
	return out
}

func (f *fixture) clearActions() {
	f.rekey.ClearActions()
	f.kube.ClearActions()
}

// TestManagerTrustsBeforeItServes: the APIServices get the bundle first;
// the certificate is issued by the current CA, recorded, and renewed only
// when the CA changes or at two thirds of its life, which the sync asks to
// be called again at.
func TestManagerTrustsBeforeItServes(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, true, apiServiceWithBundle("old"))
	f.clearActions()
	requeue, err := f.m.sync(ctx, "serving")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"patch apiservices"}, f.actions()); diff != "" {
		t.Fatalf("first sync (-want +got):\n%s", diff)
	}
	got, err := f.kube.Resource(apiServices).Get(ctx, apiServiceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	encoded, _, err := unstructured.NestedString(got.Object, "spec", "caBundle")
	if err != nil {
		t.Fatal(err)
	}
	if bundle, err := base64.StdEncoding.DecodeString(encoded); err != nil || string(bundle) != f.caPEM {
		t.Fatal("the APIService's caBundle is not the CA's bundle")
	}
	served := f.provider.Certificate()
	if served.CheckSignatureFrom(f.caCert) != nil || served.DNSNames[0] != "rekey-apiserver.rekey-system.svc" || len(served.IPAddresses) != 1 {
		t.Fatalf("served %v", served.Subject)
	}
	if len(f.records.records) != 1 || f.records.records[0].Requester != "rekey-apiserver/host-a" || f.records.records[0].CAKeyID != "serving-1" {
		t.Fatalf("records %+v", f.records.records)
	}
	if want := served.NotBefore.Add(served.NotAfter.Sub(served.NotBefore) * 2 / 3).Sub(f.now); requeue != want {
		t.Fatalf("requeued after %v, want %v (two thirds of the certificate's life)", requeue, want)
	}

	// Nothing changed: no renewal, and no request once the informer has
	// the patched APIService.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.cachedBundle() == f.caPEM, nil
	}); err != nil {
		t.Fatal("the informer never saw the patched APIService")
	}
	f.clearActions()
	if _, err := f.m.sync(ctx, "serving"); err != nil {
		t.Fatal(err)
	}
	if len(f.records.records) != 1 {
		t.Fatal("renewed without a reason")
	}
	if a := f.actions(); len(a) != 0 {
		t.Fatalf("a steady-state sync made requests: %v", a)
	}
	// Two thirds through its life: renewed.
	f.m.clock = clocktesting.NewFakePassiveClock(f.now.Add(21 * 24 * time.Hour))
	if _, err := f.m.sync(ctx, "serving"); err != nil {
		t.Fatal(err)
	}
	if len(f.records.records) != 2 || f.provider.Certificate().SerialNumber.Cmp(served.SerialNumber) == 0 {
		t.Fatal("not renewed at two thirds of its life")
	}
	if !strings.HasPrefix(f.records.records[1].CSRName, "serving:") {
		t.Fatalf("record %+v", f.records.records[1])
	}
	if a := f.actions(); len(a) != 0 {
		t.Fatalf("a renewal made requests: %v", a)
	}
}

// TestManagerCreatesTheCAOnlyWhenMissing: one create while the lister has
// no CA, none once it has one.
func TestManagerCreatesTheCAOnlyWhenMissing(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false, apiServiceWithBundle("old"))
	f.clearActions()
	if _, err := f.m.sync(ctx, "serving"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"create certificateauthorities"}, f.actions()); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	created := f.rekey.Actions()[0].(k8stesting.CreateAction).GetObject().(*rotationv1alpha1.CertificateAuthority)
	if created.Name != "serving" || created.Spec.KeyStore.Type != rotationv1alpha1.KeyStoreEtcd {
		t.Fatalf("created %+v", created)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := f.m.cas.Lister().Get("serving")
		return err == nil, nil
	}); err != nil {
		t.Fatal("the informer never saw the created CA")
	}
	// No key yet: nothing to do, and nothing asked.
	f.clearActions()
	for range 3 {
		if requeue, err := f.m.sync(ctx, "serving"); err != nil || requeue != 0 {
			t.Fatalf("sync: %v, requeue %v", err, requeue)
		}
	}
	if a := f.actions(); len(a) != 0 {
		t.Fatalf("requests with the CA in the lister: %v", a)
	}
}

// TestManagerServesOnlyOnceEveryAPIServiceTrusts: while an APIService is
// missing the certificate stays the start-up one, without retries; it is
// issued when the APIService appears.
func TestManagerServesOnlyOnceEveryAPIServiceTrusts(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, true, nil)
	startup := f.provider.Certificate()
	requeue, err := f.m.sync(ctx, "serving")
	if err != nil || requeue != 0 {
		t.Fatalf("sync: %v, requeue %v", err, requeue)
	}
	if f.provider.Certificate() != startup || len(f.records.records) != 0 {
		t.Fatal("a certificate was served before the APIService trusted its CA")
	}
	if _, err := f.kube.Resource(apiServices).Create(ctx, apiServiceWithBundle(""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, ok, _ := f.m.apiServiceInformers[apiServiceName].GetStore().GetByKey(apiServiceName)
		return ok, nil
	}); err != nil {
		t.Fatal("the informer never saw the APIService")
	}
	if _, err := f.m.sync(ctx, "serving"); err != nil {
		t.Fatal(err)
	}
	if f.provider.Certificate().CheckSignatureFrom(f.caCert) != nil || len(f.records.records) != 1 {
		t.Fatal("not served once the APIService trusts the CA")
	}
}

// countingInformer counts the handlers added to and removed from a shared
// informer.
type countingInformer struct {
	cache.SharedIndexInformer
	added, removed atomic.Int32
}

func (c *countingInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	c.added.Add(1)
	return c.SharedIndexInformer.AddEventHandler(h)
}

func (c *countingInformer) RemoveEventHandler(r cache.ResourceEventHandlerRegistration) error {
	c.removed.Add(1)
	return c.SharedIndexInformer.RemoveEventHandler(r)
}

type countingCAs struct {
	rotationinformers.CertificateAuthorityInformer
	inf *countingInformer
}

func (c countingCAs) Informer() cache.SharedIndexInformer { return c.inf }

// TestManagerRunServesAndLetsGoOfTheSharedInformer: Run, on the caller's
// started informer, serves a certificate of the CA, and removes its
// handler when it returns.
func TestManagerRunServesAndLetsGoOfTheSharedInformer(t *testing.T) {
	f := newFixture(t, true, apiServiceWithBundle("old"))
	shared := countingCAs{CertificateAuthorityInformer: f.m.cas, inf: &countingInformer{SharedIndexInformer: f.m.cas.Informer()}}
	f.m.cas = shared
	// The fixture ran the APIService informers; Run runs its own.
	f.m.apiServiceInformers = map[string]cache.SharedIndexInformer{apiServiceName: dynamicinformer.NewFilteredDynamicInformer(f.kube, apiServices, "", 0, cache.Indexers{}, nil).Informer()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.m.Run(ctx) }()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.provider.Certificate().CheckSignatureFrom(f.caCert) == nil, nil
	}); err != nil {
		t.Fatal("Run did not serve a certificate of the CA")
	}
	cancel()
	<-done
	if added, removed := shared.inf.added.Load(), shared.inf.removed.Load(); added != 1 || removed != 1 {
		t.Fatalf("handlers added %d, removed %d; want 1 and 1", added, removed)
	}
}

// TestManagerRefusesATokenKey: a serving CA whose key signs
// service-account tokens serves no certificate and reaches no APIService.
func TestManagerRefusesATokenKey(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false, apiServiceWithBundle("old"))
	if _, err := f.rekey.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "serving", UID: "u"},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd}, Purpose: rotationv1alpha1.PurposeServiceAccountTokens},
		Status: rotationv1alpha1.CertificateAuthorityStatus{Current: &rotationv1alpha1.CACertificate{Certificate: f.caPEM, Fingerprint: signing.Fingerprint(f.caCert), KeyID: "serving-1"},
			TrustBundle: f.caPEM}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := f.m.cas.Lister().Get("serving")
		return err == nil, nil
	}); err != nil {
		t.Fatal("the informer never saw the CA")
	}
	startup := f.provider.Certificate()
	f.clearActions()
	if _, err := f.m.sync(ctx, "serving"); err == nil || !strings.Contains(err.Error(), "purpose ServiceAccountTokens") {
		t.Fatalf("sync: %v, want a refusal naming the purpose", err)
	}
	if a := f.actions(); len(a) != 0 || len(f.records.records) != 0 || f.provider.Certificate() != startup {
		t.Fatalf("a token key's serving CA: requests %v, records %+v", a, f.records.records)
	}
}

// TestManagerForgetsAKeyTheRecordSaysIsRetired: a record refused because
// the CA key that signed is retired (a completed rotation this replica's
// view has not caught up with: its informer still shows the old status)
// means the cached key is stale. The next attempt must read the binding
// again and sign with the key bound now, not sign with the retired key
// again until the informer moves (a wasted signature each retry, a key
// operation on PKCS#11, refused each time).
func TestManagerForgetsAKeyTheRecordSaysIsRetired(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, true, apiServiceWithBundle("old"))
	// The cached key is serving-1.
	if _, err := f.m.authorities.Get(ctx, "serving"); err != nil {
		t.Fatal(err)
	}
	// A rotation on another replica completed: serving-2 is bound, and
	// serving-1's records are refused. The informer has not seen it.
	old, err := f.bindings.Get(ctx, "serving")
	if err != nil {
		t.Fatal(err)
	}
	newKey, _, err := f.keys.GetOrCreate(ctx, "serving-2", signing.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	newCert, err := signing.NewSelfSignedCA("serving", newKey, 365*24*time.Hour, f.now)
	if err != nil {
		t.Fatal(err)
	}
	rotated := *old
	rotated.KeyID, rotated.Certificate = "serving-2", newCert.Raw
	if err := f.bindings.Replace(ctx, old, &rotated); err != nil {
		t.Fatal(err)
	}
	startup := f.provider.Certificate()
	f.records.refuse = fmt.Errorf("recording: %w", issuance.ErrKeyRetired)
	if _, err := f.m.sync(ctx, "serving"); !errors.Is(err, issuance.ErrKeyRetired) {
		t.Fatalf("sync with the record refused: %v, want ErrKeyRetired", err)
	}
	if f.provider.Certificate() != startup {
		t.Fatal("served a certificate whose record was refused")
	}
	if _, err := f.m.sync(ctx, "serving"); err != nil {
		t.Fatal(err)
	}
	if len(f.records.records) != 1 || f.records.records[0].CAKeyID != "serving-2" {
		t.Fatalf("records %+v: want one, of the key bound now (serving-2)", f.records.records)
	}
	if f.provider.Certificate().CheckSignatureFrom(newCert) != nil {
		t.Fatal("the retry did not serve a certificate of the key bound now")
	}
}
