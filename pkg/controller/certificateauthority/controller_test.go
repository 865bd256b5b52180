package certificateauthority

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
	"rekey.io/rekey/pkg/signing/signingtest"
)

// failingKeys is a key store that is down.
type failingKeys struct{}

func (failingKeys) GetOrCreate(context.Context, string, signing.Algorithm) (crypto.Signer, bool, error) {
	return nil, false, errors.New("token not present")
}
func (failingKeys) Get(context.Context, string) (crypto.Signer, error) {
	return nil, errors.New("token not present")
}
func (failingKeys) Delete(context.Context, string) error { return nil }

func newTestController(t *testing.T, ca *rotationv1alpha1.CertificateAuthority, keys signing.KeyStore) (*Controller, *fake.Clientset, *cabinding.MemoryStore) {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(ca); err != nil {
		t.Fatal(err)
	}
	bindings := cabinding.NewMemoryStore()
	client := fake.NewSimpleClientset(ca)
	lister := rotationlisters.NewCertificateAuthorityLister(indexer)
	return &Controller{
		client:      client,
		lister:      lister,
		authorities: authority.NewAuthorities(lister, &authority.KeyStores{Etcd: keys}, bindings),
		clock:       clocktesting.NewFakePassiveClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)),
		events:      record.NewFakeRecorder(100),
	}, client, bindings
}

func statusUpdate(t *testing.T, client *fake.Clientset) *rotationv1alpha1.CertificateAuthority {
	t.Helper()
	actions := client.Actions()
	if len(actions) != 1 || actions[0].GetVerb() != "update" || actions[0].GetSubresource() != "status" {
		t.Fatalf("actions %v, want one status update", actions)
	}
	return actions[0].(k8stesting.UpdateAction).GetObject().(*rotationv1alpha1.CertificateAuthority)
}

func TestHandleBindsAndPublishes(t *testing.T) {
	ca := newCA("team-ca", "0123456789")
	c, client, bindings := newTestController(t, ca, signingtest.NewMemoryKeys())
	if _, err := c.Handle(context.Background(), ca); err != nil {
		t.Fatal(err)
	}
	updated := statusUpdate(t, client)
	b, err := bindings.Get(context.Background(), "team-ca")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(b.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	cur := updated.Status.Current
	if cur == nil || cur.KeyID != KeyIDFor(ca, 1) || cur.Fingerprint != signing.Fingerprint(cert) || updated.Status.TrustBundle != cur.Certificate {
		t.Fatalf("published %+v, bound key %s", cur, b.KeyID)
	}
	if !cert.IsCA || cert.Subject.CommonName != "team-ca" || updated.Status.ObservedGeneration != ca.Generation {
		t.Fatalf("certificate %v, observed generation %d", cert.Subject, updated.Status.ObservedGeneration)
	}
	if cond := apimeta.FindStatusCondition(updated.Status.Conditions, rotationv1alpha1.CertificateAuthorityReady); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Fatalf("Ready = %+v", cond)
	}

	// A second sync of the published object changes nothing.
	client.ClearActions()
	if _, err := c.Handle(context.Background(), updated); err != nil {
		t.Fatal(err)
	}
	if len(client.Actions()) != 0 {
		t.Fatalf("a second sync wrote: %v", client.Actions())
	}
}

func TestHandleReportsAnUnreachableKeyStore(t *testing.T) {
	ca := newCA("hsm-ca", "0123456789")
	c, client, _ := newTestController(t, ca, failingKeys{})
	recheck, err := c.Handle(context.Background(), ca)
	if err != nil {
		t.Fatal(err)
	}
	if recheck == 0 {
		t.Fatal("a CA whose key store is down is not looked at again")
	}
	updated := statusUpdate(t, client)
	cond := apimeta.FindStatusCondition(updated.Status.Conditions, rotationv1alpha1.CertificateAuthorityReady)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "KeyStoreUnavailable" || updated.Status.Current != nil {
		t.Fatalf("status %+v", updated.Status)
	}
}

// TestHandleAdoptsItsOwnPublishedCertificate: a CA that published a
// certificate before bindings existed keeps it, but only if the key made it.
func TestHandleAdoptsItsOwnPublishedCertificate(t *testing.T) {
	keys := signingtest.NewMemoryKeys()
	ca := newCA("old-ca", "0123456789")
	key, _, err := keys.GetOrCreate(context.Background(), KeyIDFor(ca, 1), signing.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	own, err := signing.NewSelfSignedCA("old-ca", key, 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca.Status.Current = describe(own, KeyIDFor(ca, 1))
	c, _, bindings := newTestController(t, ca, keys)
	if _, err := c.Handle(context.Background(), ca); err != nil {
		t.Fatal(err)
	}
	b, err := bindings.Get(context.Background(), "old-ca")
	if err != nil || string(b.Certificate) != string(own.Raw) {
		t.Fatalf("the CA's own certificate was not adopted: %v", err)
	}

	// A published certificate for another key is not adopted.
	other, err := signing.GenerateKey(signing.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := signing.NewSelfSignedCA("old-ca", other, 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca2 := newCA("new-ca", "9876543210")
	ca2.Status.Current = describe(foreign, KeyIDFor(ca2, 1))
	c2, _, bindings2 := newTestController(t, ca2, keys)
	if _, err := c2.Handle(context.Background(), ca2); err != nil {
		t.Fatal(err)
	}
	b2, err := bindings2.Get(context.Background(), "new-ca")
	if err != nil || string(b2.Certificate) == string(foreign.Raw) {
		t.Fatalf("a certificate for a foreign key was adopted: %v", err)
	}
}
