package integration

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

// The trust gate (issue #29): a rotation's new CA is published beside the
// old one while Preparing, the old one signing on, and signs only once
// every TrustConsumer naming the CA reports holding it and
// spec.rotation.trustPropagation has passed since its publication (or an
// operator overrides the wait).

// trustPropagated is the CA's TrustPropagated condition, or a zero one.
func trustPropagated(ca *rotationv1alpha1.CertificateAuthority) metav1.Condition {
	if c := apimeta.FindStatusCondition(ca.Status.Conditions, rotationv1alpha1.CertificateAuthorityTrustPropagated); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// waitingForConsumers says whether a CA is Preparing with its next CA
// published, waiting for exactly the consumers named.
func waitingForConsumers(names ...string) func(*rotationv1alpha1.CertificateAuthority) bool {
	return func(ca *rotationv1alpha1.CertificateAuthority) bool {
		return ca.Status.Phase == rotationv1alpha1.PhasePreparing && ca.Status.Next != nil && ca.Status.Trust != nil &&
			trustPropagated(ca).Reason == rotationv1alpha1.ReasonWaitingForConsumers && slices.Equal(ca.Status.Trust.WaitingFor, names)
	}
}

// registerConsumer creates TrustConsumer name, naming the CAs, as the
// client's user (its reporter); retried while RBAC settles.
func registerConsumer(t *testing.T, client clientset.Interface, name string, cas ...string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, "registering TrustConsumer "+name, func(ctx context.Context) error {
		_, err := client.RotationV1alpha1().TrustConsumers().Create(ctx, &rotationv1alpha1.TrustConsumer{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       rotationv1alpha1.TrustConsumerSpec{CertificateAuthorities: cas},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// reportHolds reports, as the consumer's reporter, that it holds the CA
// certificates with the given fingerprints.
func reportHolds(t *testing.T, client clientset.Interface, consumer, caName string, fingerprints ...string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, "TrustConsumer "+consumer+" reporting", func(ctx context.Context) error {
		tc, err := client.RotationV1alpha1().TrustConsumers().Get(ctx, consumer, metav1.GetOptions{})
		if err != nil {
			return err
		}
		tc.Status.Holds = []rotationv1alpha1.TrustHeld{{CertificateAuthority: caName, Fingerprints: fingerprints}}
		_, err = client.RotationV1alpha1().TrustConsumers().UpdateStatus(ctx, tc, metav1.UpdateOptions{})
		return err
	})
}

// requestAs makes a request as requester and approves it as admin: the
// request is attributed to requester.
func requestAs(t *testing.T, requester, admin clientset.Interface, csr *certv1alpha1.CertificateSigningRequest) {
	t.Helper()
	ctx := context.Background()
	created, err := requester.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s: %v", csr.Name, err)
	}
	addCondition(created, certv1alpha1.CertificateApproved, "Test")
	if _, err := admin.CertificatesV1alpha1().CertificateSigningRequests().UpdateApproval(ctx, created.Name, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("approve %s: %v", csr.Name, err)
	}
}

func parseCA(t *testing.T, c *rotationv1alpha1.CACertificate) *x509.Certificate {
	t.Helper()
	cert, err := authority.ParseCertificatePEM(c.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// signedBy fails unless leaf is signed by want and not by other.
func signedBy(t *testing.T, what string, leaf, want, other *x509.Certificate) {
	t.Helper()
	if err := leaf.CheckSignatureFrom(want); err != nil {
		t.Fatalf("%s: not signed by %s: %v", what, want.Subject, err)
	}
	if leaf.CheckSignatureFrom(other) == nil {
		t.Fatalf("%s: signed by the other CA too", what)
	}
}

// stillPreparing is a Stays condition: the CA is Preparing with the old CA
// current and the same next CA.
func stillPreparing(client clientset.Interface, name, current, next string) func(context.Context) error {
	return func(ctx context.Context) error {
		ca, err := client.RotationV1alpha1().CertificateAuthorities().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ca.Status.Phase != rotationv1alpha1.PhasePreparing || ca.Status.Current == nil || ca.Status.Current.Fingerprint != current ||
			ca.Status.Next == nil || ca.Status.Next.Fingerprint != next {
			return fmt.Errorf("phase %q, current %+v, next %+v, TrustPropagated %+v", ca.Status.Phase, ca.Status.Current, ca.Status.Next, trustPropagated(ca))
		}
		return nil
	}
}

// TestTrustGatePhases walks the phase table on a real kube-apiserver with
// RBAC: the consumer registers and reports as a user bound to the shipped
// rekey:trust-consumer role. Preparing publishes the next CA beside the
// old one, which signs on and names the consumer it waits for; a report of
// the old CA only keeps it waiting past trustPropagation; a report of the
// next CA opens the gate once trustPropagation has passed since
// publication; from Prepared the new CA signs, a renewal brings the
// pending count to zero and Complete needs no force.
func TestTrustGatePhases(t *testing.T) {
	t.Parallel()
	cluster := kubeCluster(t)
	ctx := context.Background()
	admin := cluster.RekeyAdmin
	// The cluster is shared (kubeCluster): what this test makes is named
	// after its CA, gated, or its consumer, kube-apiserver-gate.
	const propagation = 3 * time.Second
	createCAAndSigner(t, admin, "gated", rotationv1alpha1.CertificateAuthoritySpec{CommonName: "gated CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256,
		Rotation: &rotationv1alpha1.RotationPolicy{TrustPropagation: &metav1.Duration{Duration: propagation}, RenewalWindow: &metav1.Duration{}}})
	oldCA := caOf(t, admin, "gated")
	old := fingerprint(oldCA)

	// kube-apiserver's trust-sync, as docs tell operators to run it: its
	// own user, bound to rekey:trust-consumer.
	const syncUser = "trust-sync:kube-apiserver-gate"
	if _, err := cluster.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "it-trust-sync-kube-apiserver-gate"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "rekey:trust-consumer"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: syncUser}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	syncer, _, err := cluster.UserClient(syncUser)
	if err != nil {
		t.Fatal(err)
	}
	registerConsumer(t, syncer, "kube-apiserver-gate", "gated")

	// Start: Preparing, the next CA published beside the old one, which
	// still signs; the consumer is waited for, by name.
	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "gated", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca := waitForCA(t, admin, "gated", "Preparing, waiting for kube-apiserver-gate", waitingForConsumers("kube-apiserver-gate"))
	next := ca.Status.Next.Fingerprint
	nextCA := parseCA(t, ca.Status.Next)
	pool, n := bundlePool(t, ca.Status.TrustBundle)
	type preparing struct {
		Current, Previous           string // fingerprints
		NextIsNew                   bool
		BundleSize                  int
		BundleHasOld, BundleHasNext bool
		Consumers, Waiting          int32
		Published                   bool
		Unpublished                 []string
		Ready                       bool // the old CA signs
		Propagated                  metav1.ConditionStatus
		MessageNamesTheConsumer     bool
	}
	trusts := func(c *x509.Certificate) bool {
		_, err := c.Verify(x509.VerifyOptions{Roots: pool})
		return err == nil
	}
	cond := trustPropagated(ca)
	if diff := cmp.Diff(preparing{Current: old, NextIsNew: true, BundleSize: 2, BundleHasOld: true, BundleHasNext: true, Consumers: 1, Waiting: 1,
		Published: true, Ready: true, Propagated: metav1.ConditionFalse, MessageNamesTheConsumer: true},
		preparing{Current: ca.Status.Current.Fingerprint, Previous: previousFingerprint(ca), NextIsNew: next != old, BundleSize: n,
			BundleHasOld: trusts(oldCA), BundleHasNext: trusts(nextCA), Consumers: ca.Status.Trust.Consumers, Waiting: ca.Status.Trust.Waiting,
			Published: ca.Status.Trust.PublishedTime != nil, Unpublished: ca.Status.Trust.Unpublished,
			Ready:      apimeta.IsStatusConditionTrue(ca.Status.Conditions, rotationv1alpha1.CertificateAuthorityReady),
			Propagated: cond.Status, MessageNamesTheConsumer: strings.Contains(cond.Message, "kube-apiserver-gate")}); diff != "" {
		t.Fatalf("Preparing (-want +got):\n%s\ncondition %+v", diff, cond)
	}
	published := ca.Status.Trust.PublishedTime.Time

	// A request approved while Preparing is signed by the old CA, the one
	// status.current names.
	createAndApprove(t, admin, requestFor(t, "gated-while-preparing", "example.com/gated", fixtures.CSROptions{CommonName: "w"}, certv1alpha1.UsageClientAuth))
	signedBy(t, "a request approved while Preparing", waitForCertificate(t, admin, "gated-while-preparing"), parseCA(t, ca.Status.Current), nextCA)

	// The consumer reports holding the old CA only: the CA stays Preparing
	// past the end of trustPropagation (published + 3s): the consumer
	// holds it.
	reportHolds(t, syncer, "kube-apiserver-gate", "gated", old)
	framework.Stays(t, max(time.Until(published.Add(propagation+2*time.Second)), 2*time.Second),
		"Preparing while kube-apiserver-gate holds the old CA only", func(ctx context.Context) error {
			if err := stillPreparing(admin, "gated", old, next)(ctx); err != nil {
				return err
			}
			ca, err := admin.RotationV1alpha1().CertificateAuthorities().Get(ctx, "gated", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !waitingForConsumers("kube-apiserver-gate")(ca) {
				return fmt.Errorf("not waiting for kube-apiserver-gate: %+v, %+v", ca.Status.Trust, trustPropagated(ca))
			}
			return nil
		})

	// trustPropagation (mutable) now ends a few seconds ahead, so that the
	// report below comes before it: the gate waits for it too.
	prop := time.Since(published).Truncate(time.Second) + 6*time.Second
	patch := fmt.Sprintf(`{"spec":{"rotation":{"trustPropagation":%q}}}`, prop.String())
	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Patch(ctx, "gated", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	reportHolds(t, syncer, "kube-apiserver-gate", "gated", old, next)
	ca = waitForCA(t, admin, "gated", "WaitingForPropagation", func(ca *rotationv1alpha1.CertificateAuthority) bool {
		return ca.Status.Phase != rotationv1alpha1.PhasePreparing || trustPropagated(ca).Reason == rotationv1alpha1.ReasonWaitingForPropagation
	})
	if ca.Status.Phase != rotationv1alpha1.PhasePreparing || ca.Status.Trust.Waiting != 0 || len(ca.Status.Trust.WaitingFor) != 0 {
		t.Fatalf("after the report of the next CA: phase %q (want Preparing until %s), trust %+v", ca.Status.Phase, published.Add(prop), ca.Status.Trust)
	}
	ca = waitForPhase(t, admin, "gated", rotationv1alpha1.PhasePrepared)
	cond = trustPropagated(ca)
	if finished := ca.Status.LastInitiationFinishedTime.Time; finished.Before(published.Add(prop)) {
		t.Fatalf("Prepared at %s, before publication (%s) + trustPropagation (%s)", finished, published, prop)
	}
	if ca.Status.Current.Fingerprint != next || previousFingerprint(ca) != old || ca.Status.Next != nil ||
		cond.Status != metav1.ConditionTrue || cond.Reason != rotationv1alpha1.ReasonTrusted {
		t.Fatalf("Prepared: current %s (want the next %s), previous %s (want %s), next %+v, TrustPropagated %+v",
			ca.Status.Current.Fingerprint, next, previousFingerprint(ca), old, ca.Status.Next, cond)
	}

	// From Prepared the new CA signs; renewing the subject signed while
	// Preparing leaves nothing pending, and Complete needs no force.
	waitPending(t, admin, "gated", 1)
	createAndApprove(t, admin, requestFor(t, "gated-after-prepared", "example.com/gated", fixtures.CSROptions{CommonName: "w"}, certv1alpha1.UsageClientAuth))
	signedBy(t, "a request approved after Prepared", waitForCertificate(t, admin, "gated-after-prepared"), nextCA, oldCA)
	waitPending(t, admin, "gated", 0)
	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "gated", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("Complete without force once renewed: %v", err)
	}
	ca = waitForPhase(t, admin, "gated", rotationv1alpha1.PhaseCompleted)
	if _, n := bundlePool(t, ca.Status.TrustBundle); n != 1 || ca.Status.Current.Fingerprint != next {
		t.Fatalf("Completed: %d certificates in the bundle, current %s", n, ca.Status.Current.Fingerprint)
	}
}

// TestTrustGateSurvivesAKillWhileItWaits kills the server with SIGKILL
// while Preparing waits for a consumer: the restarted server waits on with
// the same next CA (no second key), the old CA signing, and opens the gate
// when the consumer reports the next CA.
func TestTrustGateSurvivesAKillWhileItWaits(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	ctx := context.Background()
	first := framework.StartStandalone(t, dataDir)
	// No trustPropagation: only the consumer holds the gate.
	createCAAndSigner(t, first.Client, "held", rotationv1alpha1.CertificateAuthoritySpec{CommonName: "held CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256, Rotation: framework.ImmediateRotation()})
	oldCA := caOf(t, first.Client, "held")
	old := fingerprint(oldCA)
	// Standalone mode has no RBAC: the reporter is a user of its own.
	syncer, _ := first.ClientFor(t, "trust-sync:etcd", "system:masters")
	registerConsumer(t, syncer, "etcd", "held")
	if _, err := first.Client.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "held", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca := waitForCA(t, first.Client, "held", "Preparing, waiting for etcd", waitingForConsumers("etcd"))
	next := ca.Status.Next.Fingerprint
	nextCA := parseCA(t, ca.Status.Next)
	keys := storedKeys(t, first, "held")
	if len(keys) != 2 {
		t.Fatalf("keys while Preparing: %v, want the old one and the next", keys)
	}

	first.Kill()
	framework.Eventually(t, 30*time.Second, "the killed server gone", func(context.Context) error {
		if !first.Exited() {
			return errors.New("still running")
		}
		return nil
	})
	again := framework.StartStandalone(t, dataDir)
	syncer, _ = again.ClientFor(t, "trust-sync:etcd", "system:masters")
	// The witness that the restarted controller runs the gate (it waits
	// out the killed one's lease first): a second consumer is counted.
	registerConsumer(t, syncer, "witness", "held")
	waitForCA(t, again.Client, "held", "Preparing, waiting for etcd and witness", waitingForConsumers("etcd", "witness"))
	framework.Stays(t, 3*time.Second, "Preparing with the same next CA after the restart", stillPreparing(again.Client, "held", old, next))
	if got := storedKeys(t, again, "held"); !slices.Equal(got, keys) {
		t.Fatalf("keys after the restart %v, want %v (no second next key)", got, keys)
	}
	createAndApprove(t, again.Client, requestFor(t, "after-restart", "example.com/held", fixtures.CSROptions{CommonName: "r"}, certv1alpha1.UsageClientAuth))
	signedBy(t, "a request approved while Preparing after the restart", waitForCertificate(t, again.Client, "after-restart"), oldCA, nextCA)

	reportHolds(t, syncer, "etcd", "held", old, next)
	reportHolds(t, syncer, "witness", "held", next)
	ca = waitForPhase(t, again.Client, "held", rotationv1alpha1.PhasePrepared)
	if ca.Status.Current.Fingerprint != next || previousFingerprint(ca) != old {
		t.Fatalf("Prepared with current %s (want %s), previous %s (want %s)", ca.Status.Current.Fingerprint, next, previousFingerprint(ca), old)
	}
	createAndApprove(t, again.Client, requestFor(t, "after-prepared", "example.com/held", fixtures.CSROptions{CommonName: "r"}, certv1alpha1.UsageClientAuth))
	signedBy(t, "a request approved after Prepared", waitForCertificate(t, again.Client, "after-prepared"), nextCA, oldCA)
	if got := storedKeys(t, again, "held"); !slices.Equal(got, keys) {
		t.Fatalf("keys once Prepared %v, want %v", got, keys)
	}
}

// TestTrustGateOperatorEndsTheWait: an operator removes a consumer that is
// gone (the CA reaches Prepared), or overrides the wait with Prepare and
// force (Prepared, TrustPropagated Overridden); Prepare is refused without
// force, and outside Preparing.
func TestTrustGateOperatorEndsTheWait(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	admin := srv.Client
	ctx := context.Background()
	syncer, _ := srv.ClientFor(t, "trust-sync:node-1", "system:masters")
	cas := admin.RotationV1alpha1().CertificateAuthorities()
	for _, name := range []string{"removed", "forced"} {
		createCAAndSigner(t, admin, name, rotationv1alpha1.CertificateAuthoritySpec{CommonName: name + " CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256, Rotation: framework.ImmediateRotation()})
		caOf(t, admin, name)
		registerConsumer(t, syncer, "node-1-"+name, name)
	}

	t.Run("a consumer removed while it blocks", func(t *testing.T) {
		if _, err := cas.Rotate(ctx, "removed", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ca := waitForCA(t, admin, "removed", "Preparing, waiting for node-1-removed", waitingForConsumers("node-1-removed"))
		next := ca.Status.Next.Fingerprint
		if err := admin.RotationV1alpha1().TrustConsumers().Delete(ctx, "node-1-removed", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		ca = waitForPhase(t, admin, "removed", rotationv1alpha1.PhasePrepared)
		if cond := trustPropagated(ca); ca.Status.Current.Fingerprint != next || cond.Status != metav1.ConditionTrue || cond.Reason != rotationv1alpha1.ReasonTrusted {
			t.Fatalf("Prepared with current %s (want %s), TrustPropagated %+v", ca.Status.Current.Fingerprint, next, cond)
		}
	})

	t.Run("Prepare with force overrides the wait", func(t *testing.T) {
		prepare := func(force bool) error {
			_, err := cas.Rotate(ctx, "forced", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationPrepare, Force: force}, metav1.CreateOptions{})
			return err
		}
		if err := prepare(true); !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "Preparing") {
			t.Fatalf("Prepare before Start: want 409 naming Preparing, got %v", err)
		}
		oldCA := caOf(t, admin, "forced")
		if _, err := cas.Rotate(ctx, "forced", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ca := waitForCA(t, admin, "forced", "Preparing, waiting for node-1-forced", waitingForConsumers("node-1-forced"))
		nextCA := parseCA(t, ca.Status.Next)
		if err := prepare(false); !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "force") {
			t.Fatalf("Prepare without force: want 422 naming force, got %v", err)
		}
		if got, err := cas.Get(ctx, "forced", metav1.GetOptions{}); err != nil || got.Status.Trust == nil || got.Status.Trust.OverriddenTime != nil {
			t.Fatalf("a refused Prepare left trust %+v (%v)", got.Status.Trust, err)
		}
		if err := prepare(true); err != nil {
			t.Fatalf("Prepare with force: %v", err)
		}
		ca = waitForPhase(t, admin, "forced", rotationv1alpha1.PhasePrepared)
		if cond := trustPropagated(ca); ca.Status.Current.Fingerprint != fingerprint(nextCA) || ca.Status.Trust == nil || ca.Status.Trust.OverriddenTime == nil ||
			cond.Status != metav1.ConditionTrue || cond.Reason != rotationv1alpha1.ReasonOverridden {
			t.Fatalf("Prepared by force: current %s (want %s), trust %+v, TrustPropagated %+v", ca.Status.Current.Fingerprint, fingerprint(nextCA), ca.Status.Trust, cond)
		}
		createAndApprove(t, admin, requestFor(t, "forced-after", "example.com/forced", fixtures.CSROptions{CommonName: "f"}, certv1alpha1.UsageClientAuth))
		signedBy(t, "a request approved after a forced Prepare", waitForCertificate(t, admin, "forced-after"), nextCA, oldCA)
		if err := prepare(true); !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "Prepared") {
			t.Fatalf("Prepare in Prepared: want 409 naming the phase, got %v", err)
		}
	})
}

// TestTrustGateCountsARenewalByTheHolder: a client certificate requested
// by alice for CN=bob (as a node's first certificate is requested with its
// bootstrap identity) counts as renewed when bob, its holder, renews the
// same subject: the pending count drops to zero and Complete needs no
// force.
func TestTrustGateCountsARenewalByTheHolder(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	admin := srv.Client
	ctx := context.Background()
	createCAAndSigner(t, admin, "holders", rotationv1alpha1.CertificateAuthoritySpec{CommonName: "holders CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256, Rotation: framework.ImmediateRotation()})
	alice, _ := srv.ClientFor(t, "alice")
	bob, _ := srv.ClientFor(t, "bob")
	requestAs(t, alice, admin, requestFor(t, "for-bob", "example.com/holders", fixtures.CSROptions{CommonName: "bob"}, certv1alpha1.UsageClientAuth))
	oldCA := caOf(t, admin, "holders")
	if err := waitForCertificate(t, admin, "for-bob").CheckSignatureFrom(oldCA); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "holders", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForPhase(t, admin, "holders", rotationv1alpha1.PhasePrepared)
	ca := waitPending(t, admin, "holders", 1)
	if len(ca.Status.PendingRenewals) != 1 || ca.Status.PendingRenewals[0].Requester != "alice" || ca.Status.PendingRenewals[0].CSRName != "for-bob" {
		t.Fatalf("pending renewals %+v, want for-bob requested by alice", ca.Status.PendingRenewals)
	}
	complete := func() error {
		_, err := admin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "holders", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete}, metav1.CreateOptions{})
		return err
	}
	if err := complete(); err == nil || !strings.Contains(err.Error(), "1 certificate(s)") {
		t.Fatalf("Complete with for-bob not renewed: %v", err)
	}
	requestAs(t, bob, admin, requestFor(t, "by-bob", "example.com/holders", fixtures.CSROptions{CommonName: "bob"}, certv1alpha1.UsageClientAuth))
	signedBy(t, "bob's renewal", waitForCertificate(t, admin, "by-bob"), caOf(t, admin, "holders"), oldCA)
	waitPending(t, admin, "holders", 0)
	if err := complete(); err != nil {
		t.Fatalf("Complete without force once the holder renewed: %v", err)
	}
	waitForPhase(t, admin, "holders", rotationv1alpha1.PhaseCompleted)
}
