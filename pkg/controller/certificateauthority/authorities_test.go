package certificateauthority

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
	"rekey.io/rekey/pkg/signing/signingtest"
)

func newCA(name, uid string) *rotationv1alpha1.CertificateAuthority {
	return &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{CommonName: name, KeyAlgorithm: rotationv1alpha1.ECDSAP256,
			Validity: metav1.Duration{Duration: time.Hour}, KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd}},
	}
}

// bindCA makes a CA's key and binding as the controller does, and
// publishes them in status.
func bindCA(t *testing.T, c *Controller, ca *rotationv1alpha1.CertificateAuthority) {
	t.Helper()
	b, _, err := c.bind(context.Background(), ca)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(b.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	ca.Status.Current = describe(cert, b.KeyID)
}

// TestStatusDoesNotChooseTheKey: a CA whose status names another CA's key
// (as a status write once could) still signs with its own.
func TestStatusDoesNotChooseTheKey(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	keys := signingtest.NewMemoryKeys()
	authorities := authority.NewAuthorities(rotationlisters.NewCertificateAuthorityLister(indexer), &authority.KeyStores{Etcd: keys}, cabinding.NewMemoryStore())
	c := &Controller{authorities: authorities, clock: clock.RealClock{}, events: record.NewFakeRecorder(100)}

	team, cluster := newCA("team-ca", "11111111-aaaa"), newCA("rekey.io-kube-apiserver-client", "22222222-bbbb")
	bindCA(t, c, team)
	bindCA(t, c, cluster)
	// The attack: team-ca's status names the cluster CA's key and certificate.
	team.Status.Current.KeyID = cluster.Status.Current.KeyID
	team.Status.Current.Certificate = cluster.Status.Current.Certificate
	team.Status.Current.Fingerprint = cluster.Status.Current.Fingerprint
	for _, ca := range []*rotationv1alpha1.CertificateAuthority{team, cluster} {
		if err := indexer.Add(ca); err != nil {
			t.Fatal(err)
		}
	}
	got, err := authorities.Get(context.Background(), "team-ca")
	if err != nil {
		t.Fatal(err)
	}
	clusterKey := keys.Keys[KeyIDFor(cluster, 1)]
	if signing.PublicKeysEqual(got.Signer.Public(), clusterKey.Public()) || got.KeyID == KeyIDFor(cluster, 1) {
		t.Fatal("team-ca signs with the cluster client CA's key")
	}
	if got.KeyID != KeyIDFor(team, 1) || got.Cert.Subject.CommonName != "team-ca" {
		t.Fatalf("team-ca got key %s and certificate %q", got.KeyID, got.Cert.Subject.CommonName)
	}
}

// TestRecreatedCAGetsNoOldKey: a CA deleted and made again under the same
// name is not bound to the old object's key.
func TestRecreatedCAGetsNoOldKey(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	keys := signingtest.NewMemoryKeys()
	authorities := authority.NewAuthorities(rotationlisters.NewCertificateAuthorityLister(indexer), &authority.KeyStores{Etcd: keys}, cabinding.NewMemoryStore())
	c := &Controller{authorities: authorities, clock: clock.RealClock{}, events: record.NewFakeRecorder(100)}
	old := newCA("ca", "11111111-old")
	bindCA(t, c, old)
	recreated := newCA("ca", "22222222-new")
	recreated.Status.Current = old.Status.Current.DeepCopy()
	if err := indexer.Add(recreated); err != nil {
		t.Fatal(err)
	}
	if _, err := authorities.Get(context.Background(), "ca"); err == nil || !strings.Contains(err.Error(), "has no key yet") {
		t.Fatalf("recreated CA: %v, want no key yet", err)
	}
}

// TestKeyIDsAreValidated: a key ID that would leave the key prefix never
// reaches a store.
func TestKeyIDsAreValidated(t *testing.T) {
	for _, id := range []string{"../kek-check", "a/b", "", "A", "-a", "a..b", strings.Repeat("a", signing.MaxKeyIDLength+1)} {
		if err := signing.ValidateKeyID(id); err == nil {
			t.Errorf("%q accepted", id)
		}
	}
	if err := signing.ValidateKeyID(KeyIDFor(newCA("rekey.io-kube-apiserver-client", "0123456789"), 1)); err != nil {
		t.Fatal(err)
	}
}
