package signer

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/issuer"
	"rekey.io/rekey/pkg/policy"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
	"rekey.io/rekey/pkg/signing/signingtest"
	"rekey.io/rekey/test/fixtures"
)

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

type memoryRecorder struct {
	mu      sync.Mutex
	records []issuance.Record
	err     error
}

func (r *memoryRecorder) Record(_ context.Context, rec issuance.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	r.records = append(r.records, rec)
	return nil
}

// fixture is a signer controller with one CA ("team-ca") bound to a key,
// and one Signer for example.com/team with the given policy.
type fixture struct {
	client   *fake.Clientset
	recorder *memoryRecorder
	c        *Controller
	caCert   *x509.Certificate
	// cas is the CA informer's cache the controller reads.
	cas cache.Indexer
}

func newFixture(t *testing.T, p certv1alpha1.SignerPolicy, withCA bool) *fixture {
	t.Helper()
	ctx := context.Background()
	caIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	signerIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	keys := signingtest.NewMemoryKeys()
	bindings := cabinding.NewMemoryStore()
	ca := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", UID: types.UID("0123456789")},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd}},
		Status: rotationv1alpha1.CertificateAuthorityStatus{Conditions: []metav1.Condition{
			{Type: rotationv1alpha1.CertificateAuthorityReady, Status: metav1.ConditionTrue, Reason: "Ready"}}}}
	f := &fixture{recorder: &memoryRecorder{}, cas: caIndexer}
	if withCA {
		key, _, err := keys.GetOrCreate(ctx, "team-ca-01234567-1", signing.ECDSAP256)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := signing.NewSelfSignedCA("team CA", key, 24*time.Hour, now)
		if err != nil {
			t.Fatal(err)
		}
		f.caCert = cert
		if _, err := bindings.Create(ctx, &cabinding.Binding{CAName: "team-ca", CAUID: "0123456789", KeyID: "team-ca-01234567-1", Certificate: cert.Raw}); err != nil {
			t.Fatal(err)
		}
		if err := caIndexer.Add(ca); err != nil {
			t.Fatal(err)
		}
	}
	s := &certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: validation.SignerObjectName("example.com/team")},
		Spec: certv1alpha1.SignerSpec{SignerName: "example.com/team", CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "team-ca"}, Policy: p}}
	if err := signerIndexer.Add(s); err != nil {
		t.Fatal(err)
	}
	f.client = fake.NewSimpleClientset(s)
	authorities := authority.NewAuthorities(rotationlisters.NewCertificateAuthorityLister(caIndexer), &authority.KeyStores{Etcd: keys}, bindings)
	clk := clocktesting.NewFakePassiveClock(now)
	f.c = &Controller{
		client:      f.client,
		signers:     certlisters.NewSignerLister(signerIndexer),
		authorities: authorities,
		signing:     &authority.Signing{Authorities: authorities, Recorder: f.recorder, Clock: clk},
		clock:       clk,
	}
	return f
}

func approvedCSR(t *testing.T, signerName string, request []byte, usages ...certv1alpha1.KeyUsage) *certv1alpha1.CertificateSigningRequest {
	return &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "req", UID: "uid-1"},
		Spec:       certv1alpha1.CertificateSigningRequestSpec{SignerName: signerName, Request: request, Usages: usages, Username: "alice"},
		Status: certv1alpha1.CertificateSigningRequestStatus{Conditions: []certv1alpha1.CertificateSigningRequestCondition{
			{Type: certv1alpha1.CertificateApproved, Status: metav1.ConditionTrue, Reason: "Test"}}},
	}
}

// TestHandle checks the client actions Handle makes, after kube's
// signer_test.go TestHandle.
func TestHandle(t *testing.T) {
	openPolicy := certv1alpha1.SignerPolicy{AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth, certv1alpha1.UsageDigitalSignature},
		MaxDuration: metav1.Duration{Duration: time.Hour}}
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	good := fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "alice"})
	tests := map[string]struct {
		csr         *certv1alpha1.CertificateSigningRequest
		noCA        bool
		wantErr     string
		wantActions []string // verb/subresource of each client action
		verify      func(t *testing.T, f *fixture, updated *certv1alpha1.CertificateSigningRequest)
	}{
		"issues under the policy": {
			csr:         approvedCSR(t, "example.com/team", good, certv1alpha1.UsageClientAuth),
			wantActions: []string{"update/status"},
			verify: func(t *testing.T, f *fixture, updated *certv1alpha1.CertificateSigningRequest) {
				certs, err := validation.ParseCertificateChain(updated.Status.Certificate)
				if err != nil {
					t.Fatal(err)
				}
				if err := certs[0].CheckSignatureFrom(f.caCert); err != nil {
					t.Fatalf("not signed by the bound CA: %v", err)
				}
				if got := certs[0].NotAfter.Sub(now); got != time.Hour {
					t.Errorf("lifetime %v, want the policy's maximum of 1h", got)
				}
				if len(f.recorder.records) != 1 || f.recorder.records[0].CSRName != "req" || f.recorder.records[0].CAKeyID != "team-ca-01234567-1" {
					t.Errorf("issuance records %+v", f.recorder.records)
				}
			},
		},
		"policy violation fails with the rule": {
			csr:         approvedCSR(t, "example.com/team", good, certv1alpha1.UsageServerAuth),
			wantActions: []string{"update/status"},
			verify: func(t *testing.T, f *fixture, updated *certv1alpha1.CertificateSigningRequest) {
				failed := updated.Status.Conditions[len(updated.Status.Conditions)-1]
				if failed.Type != certv1alpha1.CertificateFailed || failed.Reason != issuer.ReasonPolicyViolation || !strings.Contains(failed.Message, "policy.allowedUsages") || len(updated.Status.Certificate) != 0 {
					t.Errorf("want Failed naming policy.allowedUsages, got %+v", updated.Status)
				}
				if len(f.recorder.records) != 0 {
					t.Errorf("a refused request was recorded")
				}
			},
		},
		"weak key fails with its own reason": {
			csr:         approvedCSR(t, "example.com/team", fixtures.CSRPEMWithKey(t, weak, fixtures.CSROptions{CommonName: "alice"}), certv1alpha1.UsageClientAuth),
			wantActions: []string{"update/status"},
			verify: func(t *testing.T, f *fixture, updated *certv1alpha1.CertificateSigningRequest) {
				if failed := updated.Status.Conditions[len(updated.Status.Conditions)-1]; failed.Reason != policy.ReasonWeakPublicKey {
					t.Errorf("reason %q, want %s", failed.Reason, policy.ReasonWeakPublicKey)
				}
			},
		},
		"unparseable request fails": {
			csr:         approvedCSR(t, "example.com/team", []byte("garbage"), certv1alpha1.UsageClientAuth),
			wantActions: []string{"update/status"},
			verify: func(t *testing.T, f *fixture, updated *certv1alpha1.CertificateSigningRequest) {
				if failed := updated.Status.Conditions[len(updated.Status.Conditions)-1]; failed.Reason != issuer.ReasonInvalidRequest {
					t.Errorf("reason %q, want %s", failed.Reason, issuer.ReasonInvalidRequest)
				}
			},
		},
		"signer name without a Signer is left alone": {
			csr: approvedCSR(t, "example.org/external", good, certv1alpha1.UsageClientAuth),
		},
		// Not an error retried with backoff: the CA's add queues it
		// again (TestAWaitingRequestIsSignedWhenItsCAIsReady).
		"CA not there yet: the request waits": {
			csr:  approvedCSR(t, "example.com/team", good, certv1alpha1.UsageClientAuth),
			noCA: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, openPolicy, !tc.noCA)
			err := f.c.Handle(context.Background(), tc.csr)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one naming %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			actions := f.client.Actions()
			if len(actions) != len(tc.wantActions) {
				t.Fatalf("actions %v, want %v", actions, tc.wantActions)
			}
			for i, a := range actions {
				if got := a.GetVerb() + "/" + a.GetSubresource(); got != tc.wantActions[i] {
					t.Fatalf("action %d = %s, want %s", i, got, tc.wantActions[i])
				}
			}
			if tc.verify != nil {
				updated := actions[0].(k8stesting.UpdateAction).GetObject().(*certv1alpha1.CertificateSigningRequest)
				tc.verify(t, f, updated)
			}
			if tc.csr.Status.Certificate != nil {
				t.Fatal("Handle modified the lister's copy")
			}
		})
	}
}

// TestHandleDoesNotSignAVersionItAlreadyWroteOver: a request enqueued again
// before the informer shows the controller's own write (a CA change
// re-enqueues every waiting request) is not signed twice; once it leaves
// the informer, a later version is handled again.
func TestHandleDoesNotSignAVersionItAlreadyWroteOver(t *testing.T) {
	f := newFixture(t, certv1alpha1.SignerPolicy{AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth, certv1alpha1.UsageDigitalSignature}}, true)
	csr := approvedCSR(t, "example.com/team", fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "alice"}), certv1alpha1.UsageClientAuth)
	csr.ResourceVersion = "7"
	if err := f.client.Tracker().Add(csr.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := f.c.Handle(context.Background(), csr); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.recorder.records) != 1 || len(f.client.Actions()) != 1 {
		t.Fatalf("signed %d times, %d writes; want once", len(f.recorder.records), len(f.client.Actions()))
	}
	f.c.forget(cache.DeletedFinalStateUnknown{Key: "req", Obj: csr})
	if err := f.c.Handle(context.Background(), csr); err != nil {
		t.Fatal(err)
	}
	if len(f.recorder.records) != 2 {
		t.Fatalf("after forget: signed %d times, want 2", len(f.recorder.records))
	}
}

func TestHandleSignerReportsCAReadiness(t *testing.T) {
	RegisterMetrics() // unregistered metrics record nothing
	for name, tc := range map[string]struct {
		withCA      bool
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantRecheck bool
	}{
		"CA can sign":       {withCA: true, wantStatus: metav1.ConditionTrue},
		"CA does not exist": {withCA: false, wantStatus: metav1.ConditionFalse, wantReason: ReasonCANotFound},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, certv1alpha1.SignerPolicy{}, tc.withCA)
			s, err := f.c.signers.Get(validation.SignerObjectName("example.com/team"))
			if err != nil {
				t.Fatal(err)
			}
			recheck, err := f.c.handleSigner(context.Background(), s)
			if err != nil {
				t.Fatal(err)
			}
			if (recheck > 0) != tc.wantRecheck {
				t.Errorf("recheck = %v", recheck)
			}
			actions := f.client.Actions()
			if len(actions) != 1 || actions[0].GetSubresource() != "status" {
				t.Fatalf("actions %v, want one status update", actions)
			}
			updated := actions[0].(k8stesting.UpdateAction).GetObject().(*certv1alpha1.Signer)
			if c := updated.Status.Conditions[0]; c.Type != certv1alpha1.SignerReady || c.Status != tc.wantStatus || tc.wantReason != "" && c.Reason != tc.wantReason {
				t.Errorf("condition %+v, want Ready=%s %s", c, tc.wantStatus, tc.wantReason)
			}
			wantGauge := 0.0
			if tc.wantStatus == metav1.ConditionTrue {
				wantGauge = 1
			}
			if v, err := testutil.GetGaugeMetricValue(signerReady.WithLabelValues("example.com/team")); err != nil || v != wantGauge {
				t.Errorf("rekey_signer_ready = %v, %v, want %v", v, err, wantGauge)
			}
		})
	}
}

// A controller that stops (its leadership term ended) drops the Ready
// series of the Signers it reported.
func TestForgetAllDropsTheReadySeries(t *testing.T) {
	RegisterMetrics()
	f := newFixture(t, certv1alpha1.SignerPolicy{}, true)
	s, err := f.c.signers.Get(validation.SignerObjectName("example.com/team"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.handleSigner(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	ready := func() bool {
		families, err := legacyregistry.DefaultGatherer.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, fam := range families {
			if fam.GetName() != "rekey_signer_ready" {
				continue
			}
			for _, m := range fam.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "signer_name" && l.GetValue() == "example.com/team" {
						return true
					}
				}
			}
		}
		return false
	}
	if !ready() {
		t.Fatal("no rekey_signer_ready series after the Signer was looked at")
	}
	f.c.forgetAll()
	if ready() {
		t.Fatal("the series stayed after the controller stopped")
	}
}

func TestCASigningStateChanged(t *testing.T) {
	ca := &rotationv1alpha1.CertificateAuthority{Status: rotationv1alpha1.CertificateAuthorityStatus{Current: &rotationv1alpha1.CACertificate{Fingerprint: "a"}}}
	same := ca.DeepCopy()
	same.ResourceVersion = "2"
	rotated := ca.DeepCopy()
	rotated.Status.Current.Fingerprint = "b"
	ready := ca.DeepCopy()
	ready.Status.Conditions = []metav1.Condition{{Type: rotationv1alpha1.CertificateAuthorityReady, Status: metav1.ConditionTrue}}
	preparing := ca.DeepCopy()
	preparing.Status.Phase = rotationv1alpha1.PhasePreparing
	if caSigningStateChanged(ca, same) || !caSigningStateChanged(ca, rotated) || !caSigningStateChanged(ca, ready) || !caSigningStateChanged(ca, preparing) {
		t.Fatal("caSigningStateChanged does not follow the certificate and the Ready condition")
	}
}

// TestHandleCapsTheFailedMessage: a refusal that quotes a 20,000-character
// subject attribute is written as a Failed condition validation accepts,
// so the request stays writable (a later Deny, the cleaner's bookkeeping).
func TestHandleCapsTheFailedMessage(t *testing.T) {
	f := newFixture(t, certv1alpha1.SignerPolicy{AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth},
		Subject: certv1alpha1.SubjectPolicy{CommonNamePrefix: "team-"}}, true)
	csr := approvedCSR(t, "example.com/team", fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: strings.Repeat("é", 20000)}), certv1alpha1.UsageClientAuth)
	if err := f.c.Handle(context.Background(), csr); err != nil {
		t.Fatal(err)
	}
	actions := f.client.Actions()
	if len(actions) != 1 {
		t.Fatalf("actions %v", actions)
	}
	updated := actions[0].(k8stesting.UpdateAction).GetObject().(*certv1alpha1.CertificateSigningRequest)
	failed := updated.Status.Conditions[len(updated.Status.Conditions)-1]
	if failed.Type != certv1alpha1.CertificateFailed || len(failed.Message) > validation.MaxConditionMessageLength || !strings.Contains(failed.Message, "commonNamePrefix") {
		t.Fatalf("Failed condition of %d bytes: %.200s", len(failed.Message), failed.Message)
	}
}

// TestDeletingTheCAReChecksItsSigners: the delete of a CertificateAuthority
// puts every Signer that uses it back in the queue at once (it waited for
// the next resync, minutes, and stayed Ready=True meanwhile).
func TestDeletingTheCAReChecksItsSigners(t *testing.T) {
	ca := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", UID: "0123456789"}}
	team := &certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: validation.SignerObjectName("example.com/team")},
		Spec: certv1alpha1.SignerSpec{SignerName: "example.com/team", CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "team-ca"}}}
	other := &certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: validation.SignerObjectName("example.com/other")},
		Spec: certv1alpha1.SignerSpec{SignerName: "example.com/other", CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "other-ca"}}}
	client := fake.NewSimpleClientset(ca, team, other)
	factory := informers.NewSharedInformerFactory(client, 0)
	auth := authority.NewService(authority.Config{CAs: factory.Rotation().V1alpha1().CertificateAuthorities().Lister(),
		Stores: &authority.KeyStores{}, Bindings: cabinding.NewMemoryStore(), Clock: clocktesting.NewFakePassiveClock(now)})
	c := NewController(client, factory.Certificates().V1alpha1().CertificateSigningRequests(), factory.Certificates().V1alpha1().Signers(),
		factory.Rotation().V1alpha1().CertificateAuthorities(), auth, clocktesting.NewFakePassiveClock(now))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	// The handlers' registrations too: until they have synced, an initial
	// add may still queue a signer after the drain below.
	if !cache.WaitForCacheSync(ctx.Done(), c.signerSynced...) {
		t.Fatal("handlers did not sync")
	}
	// Drain what the adds queued.
	for c.signerQueue.Len() > 0 {
		name, _ := c.signerQueue.Get()
		c.signerQueue.Done(name)
	}
	if err := client.RotationV1alpha1().CertificateAuthorities().Delete(ctx, "team-ca", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.signerQueue.Len() > 0, nil
	}); err != nil {
		t.Fatal("no signer queued after the CA's delete")
	}
	got, shutdown := c.signerQueue.Get()
	if shutdown || got != team.Name {
		t.Fatalf("queued %q after the CA's delete, want %q", got, team.Name)
	}
	c.signerQueue.Done(got)
	if n := c.signerQueue.Len(); n != 0 {
		t.Fatalf("%d more signers queued; only team-ca's signer uses it", n)
	}
}
