package signer

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
	"rekey.io/rekey/pkg/signing/signingtest"
	"rekey.io/rekey/test/fixtures"
)

// TestHandleWaitsForTheCA: an approved request whose Signer's CA does not
// exist or is not Ready is not an error (which logs "Sync failed;
// retrying" and retries with backoff for as long as the CA is missing): it
// waits, unsigned and untouched, for the CA's change to queue it again. A
// real error stays an error.
func TestHandleWaitsForTheCA(t *testing.T) {
	p := certv1alpha1.SignerPolicy{AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth}, MaxDuration: metav1.Duration{Duration: time.Hour}}
	good := fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "alice"})

	t.Run("no CA", func(t *testing.T) {
		f := newFixture(t, p, false)
		if err := f.c.Handle(context.Background(), approvedCSR(t, "example.com/team", good, certv1alpha1.UsageClientAuth)); err != nil {
			t.Fatalf("a request waiting for a missing CA is an error: %v", err)
		}
		if a := f.client.Actions(); len(a) != 0 {
			t.Fatalf("a waiting request was written: %v", a)
		}
	})
	t.Run("a CA that is not Ready and has no key", func(t *testing.T) {
		f := newFixture(t, p, false)
		ca := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", UID: "0123456789"},
			Spec: rotationv1alpha1.CertificateAuthoritySpec{KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd}},
			Status: rotationv1alpha1.CertificateAuthorityStatus{Conditions: []metav1.Condition{
				{Type: rotationv1alpha1.CertificateAuthorityReady, Status: metav1.ConditionFalse, Reason: "KeyPending"}}}}
		if err := f.cas.Add(ca); err != nil {
			t.Fatal(err)
		}
		if err := f.c.Handle(context.Background(), approvedCSR(t, "example.com/team", good, certv1alpha1.UsageClientAuth)); err != nil {
			t.Fatalf("a request waiting for a CA that is not Ready is an error: %v", err)
		}
		if a := f.client.Actions(); len(a) != 0 {
			t.Fatalf("a waiting request was written: %v", a)
		}
	})
	t.Run("a real error", func(t *testing.T) {
		f := newFixture(t, p, true)
		f.recorder.err = errors.New("etcd is down")
		if err := f.c.Handle(context.Background(), approvedCSR(t, "example.com/team", good, certv1alpha1.UsageClientAuth)); err == nil {
			t.Fatal("a failed issuance record is not an error")
		}
	})
}

// recordsInMemory is the issuance records Service needs, in memory.
type recordsInMemory struct{ memoryRecorder }

func (*recordsInMemory) Scan(context.Context, string, func(issuance.Record) error) error { return nil }
func (*recordsInMemory) Revision(context.Context, string) (int64, error)                 { return 0, nil }
func (*recordsInMemory) Prune(context.Context, string, func(issuance.Record) bool) (int, error) {
	return 0, nil
}

// TestAWaitingRequestIsSignedWhenItsCAIsReady: with the controller
// running, an approved request for a Signer whose CA does not exist waits
// (no retry with backoff brings it back), and is signed once the CA exists
// with a key and turns Ready: the CA's change queues it again. Then a
// request of a Signer pointed at a missing CA is signed once the Signer is
// edited to name a Ready one.
func TestAWaitingRequestIsSignedWhenItsCAIsReady(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := certv1alpha1.SignerPolicy{AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth}, MaxDuration: metav1.Duration{Duration: time.Hour}}
	team := &certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: validation.SignerObjectName("example.com/team"), Generation: 1},
		Spec: certv1alpha1.SignerSpec{SignerName: "example.com/team", CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "team-ca"}, Policy: p}}
	other := &certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: validation.SignerObjectName("example.com/other"), Generation: 1},
		Spec: certv1alpha1.SignerSpec{SignerName: "example.com/other", CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "missing-ca"}, Policy: p}}
	good := fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "alice"})
	teamCSR := approvedCSR(t, "example.com/team", good, certv1alpha1.UsageClientAuth)
	otherCSR := approvedCSR(t, "example.com/other", good, certv1alpha1.UsageClientAuth)
	otherCSR.Name, otherCSR.UID = "other-req", "uid-2"
	client := fake.NewSimpleClientset(team, other, teamCSR, otherCSR)
	factory := informers.NewSharedInformerFactory(client, 0)
	keys, bindings := signingtest.NewMemoryKeys(), cabinding.NewMemoryStore()
	auth := authority.NewService(authority.Config{CAs: factory.Rotation().V1alpha1().CertificateAuthorities().Lister(),
		Stores: &authority.KeyStores{Etcd: keys}, Bindings: bindings, Records: &recordsInMemory{}, Clock: clocktesting.NewFakePassiveClock(now)})
	c := NewController(client, factory.Certificates().V1alpha1().CertificateSigningRequests(), factory.Certificates().V1alpha1().Signers(),
		factory.Rotation().V1alpha1().CertificateAuthorities(), auth, clocktesting.NewFakePassiveClock(now))
	factory.Start(ctx.Done())
	go c.Run(ctx, 1)

	signed := func(name string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			csr, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			return err == nil && len(csr.Status.Certificate) > 0, nil
		}
	}
	// Waiting: not signed while the CA is missing.
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 500*time.Millisecond, true, signed(teamCSR.Name)); err == nil {
		t.Fatal("signed without a CA")
	}

	// The CA gets its key, then is created Ready, as the CA controller
	// leaves it.
	key, _, err := keys.GetOrCreate(ctx, "team-ca-1", signing.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := signing.NewSelfSignedCA("team CA", key, 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bindings.Create(ctx, &cabinding.Binding{CAName: "team-ca", CAUID: "ca-uid", KeyID: "team-ca-1", Certificate: cert.Raw}); err != nil {
		t.Fatal(err)
	}
	ca := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", UID: "ca-uid"},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd}},
		Status: rotationv1alpha1.CertificateAuthorityStatus{
			Current:    &rotationv1alpha1.CACertificate{Fingerprint: signing.Fingerprint(cert)},
			Conditions: []metav1.Condition{{Type: rotationv1alpha1.CertificateAuthorityReady, Status: metav1.ConditionTrue, Reason: "Ready"}}}}
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Create(ctx, ca, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, signed(teamCSR.Name)); err != nil {
		t.Fatal("the waiting request was not signed once its CA was Ready")
	}

	// The other Signer is edited to name the Ready CA.
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 500*time.Millisecond, true, signed(otherCSR.Name)); err == nil {
		t.Fatal("signed with a missing CA")
	}
	edited := other.DeepCopy()
	edited.Spec.CertificateAuthorityRef.Name, edited.Generation = "team-ca", 2
	if _, err := client.CertificatesV1alpha1().Signers().Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, signed(otherCSR.Name)); err != nil {
		t.Fatal("the waiting request was not signed once its Signer named a Ready CA")
	}
}
