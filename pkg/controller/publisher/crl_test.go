package publisher

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/crl"
)

// fakeCRLs hands out one CRL (or an error) for every CA.
type fakeCRLs struct {
	mu  sync.Mutex
	der []byte
	err error
}

func (f *fakeCRLs) set(der []byte, err error) {
	f.mu.Lock()
	f.der, f.err = der, err
	f.mu.Unlock()
}

func (f *fakeCRLs) Current(_ context.Context, caName string) (*crl.CRL, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return &crl.CRL{DER: f.der, CAName: caName}, nil
}

func (f *fakeCRLs) Subscribe(func(string)) func() { return func() {} }
func (f *fakeCRLs) HasSynced() bool               { return true }

// TestConfigMapsCarryTheCRL: the current key's CRL goes beside the bundle
// as binaryData ca.crl, a new one replaces it, and one too large (or that
// cannot be made) is taken out while the bundle stays published.
func TestConfigMapsCarryTheCRL(t *testing.T) {
	f := newFixtureWith(t, nil)
	crls := &fakeCRLs{}
	f.c.crls = crls
	ctx := context.Background()
	check := func(step string, want []byte) {
		t.Helper()
		for _, ns := range []string{"listed", "labelled"} {
			cm, err := f.kube.CoreV1().ConfigMaps(ns).Get(ctx, "team-ca", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			got, ok := cm.BinaryData[CRLKey]
			if cm.Data[BundleKey] != "B1" || ok != (want != nil) || !bytes.Equal(got, want) {
				t.Fatalf("%s: ConfigMap %s/team-ca holds bundle %q and CRL %q (present %v), want %q", step, ns, cm.Data[BundleKey], got, ok, want)
			}
		}
	}
	handle := func(step string) error {
		t.Helper()
		err := f.c.Handle(ctx, teamCA("B1"))
		settle(t, f.c, f.kube)
		return err
	}

	crls.set([]byte("CRL-1"), nil)
	if err := handle("first"); err != nil {
		t.Fatal(err)
	}
	check("created", []byte("CRL-1"))
	before := len(writes(f.kube))
	if err := handle("again"); err != nil {
		t.Fatal(err)
	}
	if n := len(writes(f.kube)); n != before {
		t.Fatalf("the same bundle and CRL written again: %v", writes(f.kube)[before:])
	}

	crls.set([]byte("CRL-2"), nil)
	if err := handle("re-issued"); err != nil {
		t.Fatal(err)
	}
	check("re-issued", []byte("CRL-2"))

	crls.set(bytes.Repeat([]byte{1}, MaxPublishedCRL+1), nil)
	if err := handle("too large"); err != nil {
		t.Fatal(err)
	}
	check("too large", nil)

	crls.set([]byte("CRL-3"), nil)
	if err := handle("small again"); err != nil {
		t.Fatal(err)
	}
	check("small again", []byte("CRL-3"))

	crls.set(nil, errors.New("key store down"))
	err := handle("cannot be made")
	var pe *PublishError
	if !errors.As(err, &pe) || pe.Blocking {
		t.Fatalf("a CRL that cannot be made: %v, want a PublishError that does not hold a rotation", err)
	}
	check("cannot be made", nil)
}

func TestConfigMapDigestTellsTheCRLApart(t *testing.T) {
	a, b := configMapDigest("B1", nil), configMapDigest("B1", []byte("C"))
	if a != digest("B1") || a == b || b != configMapDigest("B1", []byte("C")) {
		t.Fatalf("digests %q %q", a, b)
	}
	if configMapDigest("B", []byte("1C")) == configMapDigest("B1", []byte("C")) {
		t.Fatal("another split of the same bytes has the same digest")
	}
}
