package authority

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
	"rekey.io/rekey/pkg/signing/signingtest"
)

// TestKeysOfACAForCRLs: a CA in a rotation has its current and previous
// keys (from status), each handed out with its own certificate (from the
// binding); a next key, another key, another CA are not there.
func TestKeysOfACAForCRLs(t *testing.T) {
	ctx := context.Background()
	keys := signingtest.NewMemoryKeys()
	certFor := func(id string) []byte {
		key, _, err := keys.GetOrCreate(ctx, id, signing.ECDSAP256)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := signing.NewSelfSignedCA("ca "+id, key, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return cert.Raw
	}
	prev, cur, next := certFor("k1"), certFor("k2"), certFor("k3")
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	ca := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "ca", UID: "u1"},
		Status: rotationv1alpha1.CertificateAuthorityStatus{Current: &rotationv1alpha1.CACertificate{KeyID: "k2"}, Previous: &rotationv1alpha1.CACertificate{KeyID: "k1"}}}
	file := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "files", UID: "u2"},
		Spec:   rotationv1alpha1.CertificateAuthoritySpec{KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreFile}},
		Status: rotationv1alpha1.CertificateAuthorityStatus{Current: &rotationv1alpha1.CACertificate{Fingerprint: "SHA256:ab"}}}
	fresh := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "fresh", UID: "u3"}}
	for _, o := range []any{ca, file, fresh} {
		if err := indexer.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	bindings := cabinding.NewMemoryStore()
	if _, err := bindings.Create(ctx, &cabinding.Binding{CAName: "ca", CAUID: "u1", KeyID: "k2", Certificate: cur, Generation: 2,
		Previous: &cabinding.Key{KeyID: "k1", Certificate: prev}, Next: &cabinding.Key{KeyID: "k3", Certificate: next}}); err != nil {
		t.Fatal(err)
	}
	a := NewAuthorities(rotationlisters.NewCertificateAuthorityLister(indexer), &KeyStores{Etcd: keys}, bindings)

	if c, p, err := a.KeyIDs("ca"); err != nil || c != "k2" || p != "k1" {
		t.Fatalf("KeyIDs(ca) = %q, %q, %v; want k2, k1", c, p, err)
	}
	if c, p, err := a.KeyIDs("files"); err != nil || c != "file:SHA256:ab" || p != "" {
		t.Fatalf("KeyIDs(files) = %q, %q, %v; want the File CA's key ID alone", c, p, err)
	}
	for _, name := range []string{"fresh", "missing"} {
		if _, _, err := a.KeyIDs(name); !errors.Is(err, ErrNoSuchKey) {
			t.Errorf("KeyIDs(%s): %v, want ErrNoSuchKey", name, err)
		}
	}
	for id, want := range map[string][]byte{"k2": cur, "k1": prev} {
		auth, err := a.KeyByID(ctx, "ca", id)
		if err != nil {
			t.Fatalf("KeyByID(ca, %s): %v", id, err)
		}
		if auth.KeyID != id || string(auth.Cert.Raw) != string(want) || !signing.PublicKeysEqual(auth.Cert.PublicKey, auth.Signer.Public()) {
			t.Fatalf("KeyByID(ca, %s) handed out key %s with another certificate", id, auth.KeyID)
		}
	}
	for _, tc := range []struct{ ca, key string }{{"ca", "k3"}, {"ca", "k9"}, {"missing", "k2"}, {"files", "k1"}} {
		if _, err := a.KeyByID(ctx, tc.ca, tc.key); !errors.Is(err, ErrNoSuchKey) {
			t.Errorf("KeyByID(%s, %s): %v, want ErrNoSuchKey", tc.ca, tc.key, err)
		}
	}
}

// TestTokenKeyHasNoCRL: a ServiceAccountTokens CA's keys sign no CRL (it
// issued nothing to revoke), so none is handed out for one, and Signing's
// check refuses it for certificates.
func TestTokenKeyHasNoCRL(t *testing.T) {
	ctx := context.Background()
	keys := signingtest.NewMemoryKeys()
	key, _, err := keys.GetOrCreate(ctx, "k1", signing.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := signing.NewSelfSignedCA("tokens", key, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	ca := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "sa", UID: "u1"},
		Spec:   rotationv1alpha1.CertificateAuthoritySpec{Purpose: rotationv1alpha1.PurposeServiceAccountTokens},
		Status: rotationv1alpha1.CertificateAuthorityStatus{Current: &rotationv1alpha1.CACertificate{KeyID: "k1"}}}
	if err := indexer.Add(ca); err != nil {
		t.Fatal(err)
	}
	bindings := cabinding.NewMemoryStore()
	if _, err := bindings.Create(ctx, &cabinding.Binding{CAName: "sa", CAUID: "u1", KeyID: "k1", Certificate: cert.Raw}); err != nil {
		t.Fatal(err)
	}
	a := NewAuthorities(rotationlisters.NewCertificateAuthorityLister(indexer), &KeyStores{Etcd: keys}, bindings)
	if _, _, err := a.KeyIDs("sa"); !errors.Is(err, ErrNoSuchKey) {
		t.Errorf("KeyIDs(sa): %v, want ErrNoSuchKey", err)
	}
	if _, err := a.KeyByID(ctx, "sa", "k1"); !errors.Is(err, ErrNoSuchKey) {
		t.Errorf("KeyByID(sa, k1): %v, want ErrNoSuchKey", err)
	}
	if err := a.CheckIssuesCertificates("sa"); !errors.Is(err, ErrNotForCertificates) {
		t.Errorf("CheckIssuesCertificates(sa): %v", err)
	}
	// The key itself is there for whoever signs tokens with it.
	if auth, err := a.Get(ctx, "sa"); err != nil || auth.KeyID != "k1" {
		t.Errorf("Get(sa): %v", err)
	}
}
