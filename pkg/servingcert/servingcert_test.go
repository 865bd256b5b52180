package servingcert

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
	"rekey.io/rekey/pkg/signing/signingtest"
)

type countingListener struct{ n int }

func (l *countingListener) Enqueue() { l.n++ }

type memoryRecords struct{ records []issuance.Record }

func (m *memoryRecords) Record(_ context.Context, r issuance.Record) error {
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

// TestManagerTrustsBeforeItServes: the APIServices get the bundle first;
// the certificate is issued by the current CA, recorded, and renewed only
// when the CA changes or at two thirds of its life.
func TestManagerTrustsBeforeItServes(t *testing.T) {
	ctx := context.Background()
	keys := signingtest.NewMemoryKeys()
	bindings := cabinding.NewMemoryStore()
	caKey, _, err := keys.GetOrCreate(ctx, "serving-1", signing.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	caCert, err := signing.NewSelfSignedCA("serving", caKey, 365*24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bindings.Create(ctx, &cabinding.Binding{CAName: "serving", CAUID: "u", KeyID: "serving-1", Certificate: caCert.Raw}); err != nil {
		t.Fatal(err)
	}
	caPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw}))
	ca := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "serving", UID: "u"},
		Spec:   rotationv1alpha1.CertificateAuthoritySpec{KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd}},
		Status: rotationv1alpha1.CertificateAuthorityStatus{Current: &rotationv1alpha1.CACertificate{Certificate: caPEM, Fingerprint: signing.Fingerprint(caCert), KeyID: "serving-1"}, TrustBundle: caPEM}}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(ca); err != nil {
		t.Fatal(err)
	}
	lister := rotationlisters.NewCertificateAuthorityLister(indexer)

	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1alpha1.certificates.rekey.io"},
		"spec":     map[string]any{"caBundle": base64.StdEncoding.EncodeToString([]byte("old"))},
	}}
	scheme := runtime.NewScheme()
	kube := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{apiServices: "APIServiceList"}, apiService)

	startup, err := pki.NewCA("startup", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	startupKey, err := startup.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	provider := NewProvider(startup.CertPEM(), startupKey)
	records := &memoryRecords{}
	m := &Manager{cfg: Config{CAName: "serving", Hosts: []string{"rekey-apiserver.rekey-system.svc", "127.0.0.1"}, APIServices: []string{"v1alpha1.certificates.rekey.io"},
		Validity: 30 * 24 * time.Hour, Provider: provider}, replica: "host-a", records: records, kube: kube, clock: clocktesting.NewFakePassiveClock(now),
		authorities: authority.NewAuthorities(lister, &authority.KeyStores{Etcd: keys}, bindings)}

	if err := m.sync(ctx, lister); err != nil {
		t.Fatal(err)
	}
	got, err := kube.Resource(apiServices).Get(ctx, "v1alpha1.certificates.rekey.io", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	encoded, _, err := unstructured.NestedString(got.Object, "spec", "caBundle")
	if err != nil {
		t.Fatal(err)
	}
	if bundle, err := base64.StdEncoding.DecodeString(encoded); err != nil || string(bundle) != caPEM {
		t.Fatal("the APIService's caBundle is not the CA's bundle")
	}
	served := provider.Certificate()
	if served.CheckSignatureFrom(caCert) != nil || served.DNSNames[0] != "rekey-apiserver.rekey-system.svc" || len(served.IPAddresses) != 1 {
		t.Fatalf("served %v", served.Subject)
	}
	if len(records.records) != 1 || records.records[0].Requester != "rekey-apiserver/host-a" || records.records[0].CAKeyID != "serving-1" {
		t.Fatalf("records %+v", records.records)
	}
	// Nothing changed: no renewal.
	if err := m.sync(ctx, lister); err != nil {
		t.Fatal(err)
	}
	if len(records.records) != 1 {
		t.Fatal("renewed without a reason")
	}
	// Two thirds through its life: renewed.
	m.clock = clocktesting.NewFakePassiveClock(now.Add(21 * 24 * time.Hour))
	if err := m.sync(ctx, lister); err != nil {
		t.Fatal(err)
	}
	if len(records.records) != 2 || provider.Certificate().SerialNumber.Cmp(served.SerialNumber) == 0 {
		t.Fatal("not renewed at two thirds of its life")
	}
	if !strings.HasPrefix(records.records[1].CSRName, "serving:") {
		t.Fatalf("record %+v", records.records[1])
	}
}
