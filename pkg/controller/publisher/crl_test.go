package publisher

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"math/big"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/crl"
	"rekey.io/rekey/pkg/pki"
)

// fakeCRLs hands out the same CRLs (the current key's first), or an
// error, for every CA.
type fakeCRLs struct {
	mu   sync.Mutex
	ders [][]byte
	err  error
}

func (f *fakeCRLs) set(err error, ders ...[]byte) {
	f.mu.Lock()
	f.ders, f.err = ders, err
	f.mu.Unlock()
}

func (f *fakeCRLs) Live(_ context.Context, caName string) ([]*crl.CRL, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	out := make([]*crl.CRL, 0, len(f.ders))
	for _, der := range f.ders {
		out = append(out, &crl.CRL{DER: der, CAName: caName})
	}
	return out, nil
}

func (f *fakeCRLs) Subscribe(func(string)) func() { return func() {} }
func (f *fakeCRLs) HasSynced() bool               { return true }

// pemCRLs is ca-crl.pem as it should be for ders: each in a PEM block
// "X509 CRL", in order.
func pemCRLs(ders ...[]byte) string {
	var out []byte
	for _, der := range ders {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der})...)
	}
	return string(out)
}

// checkCRLs fails unless the ConfigMaps team-ca in the namespaces the
// fixture publishes to hold the bundle B1 and, for ders (the current
// key's first), ca.crl with the first and ca-crl.pem with all; with no
// ders, neither key.
func checkCRLs(t *testing.T, f *fixture, step string, ders ...[]byte) {
	t.Helper()
	for _, ns := range []string{"listed", "labelled"} {
		cm, err := f.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "team-ca", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		der, hasDER := cm.BinaryData[CRLKey]
		pemData, hasPEM := cm.Data[CRLPEMKey]
		if cm.Data[BundleKey] != "B1" {
			t.Fatalf("%s: ConfigMap %s/team-ca holds bundle %q", step, ns, cm.Data[BundleKey])
		}
		if len(ders) == 0 {
			if hasDER || hasPEM {
				t.Fatalf("%s: ConfigMap %s/team-ca holds CRLs (%s %v, %s %v), want none", step, ns, CRLKey, hasDER, CRLPEMKey, hasPEM)
			}
			continue
		}
		if !bytes.Equal(der, ders[0]) || pemData != pemCRLs(ders...) {
			t.Fatalf("%s: ConfigMap %s/team-ca holds %s %q and %s %q, want %q and %q", step, ns, CRLKey, der, CRLPEMKey, pemData, ders[0], pemCRLs(ders...))
		}
	}
}

// TestConfigMapsCarryTheCRL: the current key's CRL goes beside the bundle
// as binaryData ca.crl (and as ca-crl.pem), a new one replaces it, and one
// too large (or that cannot be made) is taken out while the bundle stays
// published.
func TestConfigMapsCarryTheCRL(t *testing.T) {
	f := newFixtureWith(t, nil)
	crls := &fakeCRLs{}
	f.c.crls = crls
	ctx := context.Background()
	handle := func(step string) error {
		t.Helper()
		err := f.c.Handle(ctx, teamCA("B1"))
		settle(t, f.c, f.kube)
		return err
	}

	crls.set(nil, []byte("CRL-1"))
	if err := handle("first"); err != nil {
		t.Fatal(err)
	}
	checkCRLs(t, f, "created", []byte("CRL-1"))
	before := len(writes(f.kube))
	if err := handle("again"); err != nil {
		t.Fatal(err)
	}
	if n := len(writes(f.kube)); n != before {
		t.Fatalf("the same bundle and CRL written again: %v", writes(f.kube)[before:])
	}

	crls.set(nil, []byte("CRL-2"))
	if err := handle("re-issued"); err != nil {
		t.Fatal(err)
	}
	checkCRLs(t, f, "re-issued", []byte("CRL-2"))

	crls.set(nil, bytes.Repeat([]byte{1}, MaxPublishedCRL+1))
	if err := handle("too large"); err != nil {
		t.Fatal(err)
	}
	checkCRLs(t, f, "too large")

	crls.set(nil, []byte("CRL-3"))
	if err := handle("small again"); err != nil {
		t.Fatal(err)
	}
	checkCRLs(t, f, "small again", []byte("CRL-3"))

	crls.set(errors.New("key store down"))
	err := handle("cannot be made")
	var pe *PublishError
	if !errors.As(err, &pe) || pe.Blocking {
		t.Fatalf("a CRL that cannot be made: %v, want a PublishError that does not hold a rotation", err)
	}
	checkCRLs(t, f, "cannot be made")
}

// TestConfigMapsCarryThePreviousKeysCRLDuringARotation: while a CA is
// Prepared its bundle trusts the previous key too, so ca-crl.pem holds
// that key's CRL after the current key's, each verifying against its own
// CA certificate; ca.crl stays the current key's; after Complete only the
// current key's is left. The size limit is on all of them together.
func TestConfigMapsCarryThePreviousKeysCRLDuringARotation(t *testing.T) {
	f := newFixtureWith(t, nil)
	crls := &fakeCRLs{}
	f.c.crls = crls
	ctx := context.Background()
	now := time.Now()
	sign := func(name string, n int64) ([]byte, *x509.Certificate) {
		t.Helper()
		kp, err := pki.NewCA(name, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		c, err := crl.Issue(nil, kp.Cert, kp.Key, big.NewInt(n), now, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return c.DER, kp.Cert
	}
	curDER, curCA := sign("team CA new", 2)
	prevDER, prevCA := sign("team CA old", 1)
	prepared := teamCA("B1")
	prepared.Status.Phase = rotationv1alpha1.PhasePrepared

	crls.set(nil, curDER, prevDER)
	if err := f.c.Handle(ctx, prepared); err != nil {
		t.Fatal(err)
	}
	settle(t, f.c, f.kube)
	checkCRLs(t, f, "prepared", curDER, prevDER)
	cm, err := f.kube.CoreV1().ConfigMaps("listed").Get(ctx, "team-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rest := []byte(cm.Data[CRLPEMKey])
	for i, ca := range []*x509.Certificate{curCA, prevCA} {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil || block.Type != "X509 CRL" {
			t.Fatalf("%s: block %d is %v, want an X509 CRL", CRLPEMKey, i, block)
		}
		rl, err := x509.ParseRevocationList(block.Bytes)
		if err != nil {
			t.Fatalf("%s: CRL %d: %v", CRLPEMKey, i, err)
		}
		if err := rl.CheckSignatureFrom(ca); err != nil {
			t.Fatalf("%s: CRL %d does not verify against %s: %v", CRLPEMKey, i, ca.Subject.CommonName, err)
		}
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("%s holds more than two CRLs: %q", CRLPEMKey, rest)
	}

	// Completed: the previous key is destroyed, its CRL goes.
	crls.set(nil, curDER)
	if err := f.c.Handle(ctx, teamCA("B1")); err != nil {
		t.Fatal(err)
	}
	settle(t, f.c, f.kube)
	checkCRLs(t, f, "completed", curDER)

	// Each fits alone (its DER and PEM: 2.4 times a third), not all
	// together (DER + PEM of both: 3.7 times a third).
	big1, big2 := bytes.Repeat([]byte{1}, MaxPublishedCRL/3), bytes.Repeat([]byte{2}, MaxPublishedCRL/3)
	crls.set(nil, big1)
	if err := f.c.Handle(ctx, teamCA("B1")); err != nil {
		t.Fatal(err)
	}
	settle(t, f.c, f.kube)
	checkCRLs(t, f, "large alone", big1)
	crls.set(nil, big1, big2)
	if err := f.c.Handle(ctx, prepared); err != nil {
		t.Fatal(err)
	}
	settle(t, f.c, f.kube)
	checkCRLs(t, f, "too large together")
}

func TestConfigMapDigestTellsTheCRLApart(t *testing.T) {
	a, b := configMapDigest("B1", publishedCRLs{}), configMapDigest("B1", publishedCRLs{der: []byte("C")})
	if a != digest("B1") || a == b || b != configMapDigest("B1", publishedCRLs{der: []byte("C")}) {
		t.Fatalf("digests %q %q", a, b)
	}
	if configMapDigest("B", publishedCRLs{der: []byte("1C")}) == configMapDigest("B1", publishedCRLs{der: []byte("C")}) {
		t.Fatal("another split of the same bytes has the same digest")
	}
	if configMapDigest("B1", publishedCRLs{der: []byte("C"), pem: "P"}) == configMapDigest("B1", publishedCRLs{der: []byte("CP")}) {
		t.Fatal("a CRL moved from ca-crl.pem to ca.crl has the same digest")
	}
	if configMapDigest("B1", publishedCRLs{der: []byte("C"), pem: "P1"}) == configMapDigest("B1", publishedCRLs{der: []byte("C"), pem: "P1P2"}) {
		t.Fatal("a previous key's CRL added to ca-crl.pem does not change the digest")
	}
}
