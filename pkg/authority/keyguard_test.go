package authority

import (
	"context"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
	"rekey.io/rekey/test/etcdtest"
	"rekey.io/rekey/test/fixtures"
)

// TestSigningCannotPublishWithARetiredKey: a replica whose view of a CA is
// stale (its cache still holds the key a rotation retired, its informer
// has not seen the rotation) signs, but the record of that signature is
// refused in etcd, so Sign returns no certificate. Each way a completed
// rotation leaves etcd counts: the key destroyed and dropped from the
// binding (Complete of an Etcd key), only dropped from the binding (all a
// PKCS#11 key's Complete changes in etcd), and only destroyed (Complete
// stopped between its two steps). The previous key of a rotation that has
// not completed still signs.
func TestSigningCannotPublishWithARetiredKey(t *testing.T) {
	for name, tc := range map[string]struct {
		destroy, unbind bool
		keyStore        rotationv1alpha1.KeyStoreType
	}{
		"destroyed and unbound":          {destroy: true, unbind: true},
		"unbound only, a PKCS11 key":     {unbind: true, keyStore: rotationv1alpha1.KeyStorePKCS11},
		"unbound only, an Etcd key":      {unbind: true},
		"destroyed, binding not updated": {destroy: true},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			client := etcdtest.Start(t)
			kek, err := signing.NewKEK()
			if err != nil {
				t.Fatal(err)
			}
			keys, err := signing.NewEtcdKeyStore(ctx, client, "/private", kek)
			if err != nil {
				t.Fatal(err)
			}
			bindings := cabinding.NewEtcdStore(client, "/private")
			recorder := issuance.NewRecorder(ctx, client, "/private")
			certFor := func(id string) []byte {
				key, _, err := keys.GetOrCreate(ctx, id, signing.ECDSAP256)
				if err != nil {
					t.Fatal(err)
				}
				cert, err := signing.NewSelfSignedCA("team CA "+id, key, 24*time.Hour, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				return cert.Raw
			}
			k1, k2 := certFor("team-ca-k1"), certFor("team-ca-k2")
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			// The informer's view never moves: status names no key, so the
			// cache is used as it is (a replica that has not seen the
			// rotation).
			ca := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", UID: "u1"},
				Spec: rotationv1alpha1.CertificateAuthoritySpec{KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd}}}
			if err := indexer.Add(ca); err != nil {
				t.Fatal(err)
			}
			first := &cabinding.Binding{CAName: "team-ca", CAUID: "u1", KeyID: "team-ca-k1", Certificate: k1, Generation: 1}
			if _, err := bindings.Create(ctx, first); err != nil {
				t.Fatal(err)
			}
			svc := NewService(Config{Stores: &KeyStores{Etcd: keys}, Bindings: bindings,
				CAs: rotationlisters.NewCertificateAuthorityLister(indexer), Records: recorder, Clock: clock.RealClock{}})

			signer := &certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: "team"},
				Spec: certv1alpha1.SignerSpec{SignerName: "example.com/team", CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "team-ca"},
					Policy: certv1alpha1.SignerPolicy{AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth, certv1alpha1.UsageDigitalSignature}}}}
			sign := func(name string) (Signed, error) {
				csr := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
					Spec: certv1alpha1.CertificateSigningRequestSpec{SignerName: "example.com/team", Username: "alice",
						Request: fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "alice"}), Usages: []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth}}}
				return svc.Signing.Sign(ctx, signer, csr, time.Time{}, PathApproval)
			}
			if s, err := sign("before"); err != nil || s.Certificate == nil {
				t.Fatalf("signing with the bound key: %v, %+v", err, s.Failure)
			}
			// Prepared: k2 signs, k1 is previous. This replica still holds k1.
			promoted := &cabinding.Binding{CAName: "team-ca", CAUID: "u1", KeyID: "team-ca-k2", Certificate: k2, Generation: 2,
				Previous: &cabinding.Key{KeyID: "team-ca-k1", Certificate: k1}}
			if err := bindings.Replace(ctx, first, promoted); err != nil {
				t.Fatal(err)
			}
			if s, err := sign("prepared"); err != nil || s.Certificate == nil || s.CA.Equal(mustParse(t, k2)) {
				t.Fatalf("signing with the previous key before Complete: %v, %+v (want a certificate of the previous key)", err, s.Failure)
			}
			if tc.keyStore != "" {
				// The key stays cached from the Etcd store; from here the
				// informer says the CA's keys live elsewhere (a PKCS#11
				// token), whose keys have nothing in etcd: only the
				// binding can tell their rotation.
				other := ca.DeepCopy()
				other.Spec.KeyStore.Type = tc.keyStore
				if err := indexer.Update(other); err != nil {
					t.Fatal(err)
				}
			}
			// Complete.
			if tc.destroy {
				if err := keys.Delete(ctx, "team-ca-k1"); err != nil {
					t.Fatal(err)
				}
			}
			if tc.unbind {
				completed := *promoted
				completed.Previous = nil
				if err := bindings.Replace(ctx, promoted, &completed); err != nil {
					t.Fatal(err)
				}
			}
			s, err := sign("stale")
			if err == nil || s.Certificate != nil {
				t.Fatalf("a stale replica signed with the retired key and got a certificate (err %v)", err)
			}
			if !errors.Is(err, issuance.ErrKeyRetired) {
				t.Fatalf("the refusal %v is not ErrKeyRetired", err)
			}
			recs, err := recorder.List(ctx, "team-ca")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				if r.CSRName == "stale" {
					t.Fatalf("a record of the retired key was written: %+v", r)
				}
			}
			if tc.keyStore != "" {
				return // no token to load the current key from
			}
			// The refusal makes the replica read the binding again: the
			// next request is signed with the current key.
			if s, err := sign("after"); err != nil || s.Certificate == nil || !s.CA.Equal(mustParse(t, k2)) {
				t.Fatalf("signing after the refusal: %v (want a certificate of the current key)", err)
			}
		})
	}
}

func mustParse(t *testing.T, der []byte) *x509.Certificate {
	t.Helper()
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
