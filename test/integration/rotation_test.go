package integration

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

// kubectlRekey runs the plugin against a server and returns its output.
func kubectlRekey(t *testing.T, srv *framework.Standalone, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(framework.Binary(t, "kubectl-rekey"), append([]string{"--kubeconfig", srv.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func waitForPhase(t *testing.T, client clientset.Interface, name string, phase rotationv1alpha1.RotationPhase) *rotationv1alpha1.CertificateAuthority {
	t.Helper()
	return waitForCA(t, client, name, "phase "+string(phase), func(ca *rotationv1alpha1.CertificateAuthority) bool { return ca.Status.Phase == phase })
}

// waitForCA waits until cond holds for a CertificateAuthority and returns
// it.
func waitForCA(t *testing.T, client clientset.Interface, name, what string, cond func(*rotationv1alpha1.CertificateAuthority) bool) *rotationv1alpha1.CertificateAuthority {
	t.Helper()
	var ca *rotationv1alpha1.CertificateAuthority
	framework.Eventually(t, 60*time.Second, fmt.Sprintf("CertificateAuthority %s reaches %s", name, what), func(ctx context.Context) error {
		got, err := client.RotationV1alpha1().CertificateAuthorities().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ca = got
		if !cond(got) {
			data, _ := json.Marshal(got)
			return fmt.Errorf("not yet: %s", data)
		}
		return nil
	})
	return ca
}

// bundlePool parses a trust bundle.
func bundlePool(t *testing.T, bundle string) (*x509.CertPool, int) {
	t.Helper()
	certs, err := validation.ParseCertificateChain([]byte(bundle))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, len(certs)
}

func verifies(leaf *x509.Certificate, pool *x509.CertPool) bool {
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil
}

// storedKeys lists the CA key IDs in the embedded etcd.
func storedKeys(t *testing.T, srv *framework.Standalone, caName string) []string {
	t.Helper()
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + filepath.Join(srv.DataDir, "etcd.sock")}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	resp, err := client.Get(context.Background(), "/rekey.io-private/cakeys/"+caName+"-", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, kv := range resp.Kvs {
		ids = append(ids, strings.TrimPrefix(string(kv.Key), "/rekey.io-private/cakeys/"))
	}
	return ids
}

// TestCARotation walks a whole rotation through kubectl rekey and the API:
// old certificates verify against the bundle while both CAs are trusted,
// new ones chain to the new CA, renewals bring the count down, Complete is
// refused while it is above zero and forced, and the old key is destroyed.
func TestCARotation(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	client := srv.Client
	ctx := context.Background()
	// No trust consumer and no wait: the new CA signs once published
	// (TestTrustGate* covers the wait).
	createCAAndSigner(t, client, "team", rotationv1alpha1.CertificateAuthoritySpec{CommonName: "team CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256, Rotation: framework.ImmediateRotation()})
	oldCA := caOf(t, client, "team")
	for _, n := range []string{"a", "b"} {
		createAndApprove(t, client, requestFor(t, "before-"+n, "example.com/team", fixtures.CSROptions{CommonName: n}, certv1alpha1.UsageClientAuth))
	}
	beforeA, beforeB := waitForCertificate(t, client, "before-a"), waitForCertificate(t, client, "before-b")
	oldKeys := storedKeys(t, srv, "team")
	if len(oldKeys) != 1 {
		t.Fatalf("keys before the rotation: %v", oldKeys)
	}

	out, err := kubectlRekey(t, srv, "rotate", "complete", "team")
	if err == nil || !strings.Contains(out, "cannot Complete: phase is") {
		t.Fatalf("Complete before any Start: %v\n%s", err, out)
	}
	out, err = kubectlRekey(t, srv, "rotate", "start", "team")
	if err != nil || !strings.Contains(out, "rotation started") {
		t.Fatalf("rotate start: %v\n%s", err, out)
	}
	ca := waitForPhase(t, client, "team", rotationv1alpha1.PhasePrepared)
	pool, n := bundlePool(t, ca.Status.TrustBundle)
	type prepared struct {
		Previous                           string // fingerprint
		InitiationTime, InitiationFinished bool   // recorded
		BundleSize                         int
		TrustsBeforeA, TrustsBeforeB       bool
	}
	if diff := cmp.Diff(prepared{Previous: fingerprint(oldCA), InitiationTime: true, InitiationFinished: true, BundleSize: 2, TrustsBeforeA: true, TrustsBeforeB: true},
		prepared{Previous: previousFingerprint(ca), InitiationTime: ca.Status.LastInitiationTime != nil, InitiationFinished: ca.Status.LastInitiationFinishedTime != nil,
			BundleSize: n, TrustsBeforeA: verifies(beforeA, pool), TrustsBeforeB: verifies(beforeB, pool)}); diff != "" {
		t.Fatalf("after Start (-want +got):\n%s", diff)
	}
	if ca.Status.Current.Fingerprint == fingerprint(oldCA) {
		t.Fatalf("after Start the current CA is still the old one %s", fingerprint(oldCA))
	}
	_, err = client.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "team", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "phase is Prepared") {
		t.Fatalf("second Start: %v", err)
	}
	waitPending(t, client, "team", 2)
	waitForMetrics(t, client, `rekey_ca_rotation_phase{ca="team",phase="Prepared"} 1`, `rekey_ca_pending_renewal_certificates{ca="team"} 2`,
		`rekey_ca_not_after_timestamp_seconds{ca="team"}`, `rekey_ca_rotation_phase_since_timestamp_seconds{ca="team"}`)

	// a renews: the new certificate chains to the new CA only.
	createAndApprove(t, client, requestFor(t, "after-a", "example.com/team", fixtures.CSROptions{CommonName: "a"}, certv1alpha1.UsageClientAuth))
	afterA := waitForCertificate(t, client, "after-a")
	newCA := caOf(t, client, "team")
	if err := afterA.CheckSignatureFrom(newCA); err != nil || afterA.CheckSignatureFrom(oldCA) == nil {
		t.Fatalf("a certificate signed after Start does not chain to the new CA only: %v", err)
	}
	ca = waitPending(t, client, "team", 1)
	if len(ca.Status.PendingRenewals) != 1 || !strings.Contains(ca.Status.PendingRenewals[0].Subject, "CN=b") || ca.Status.PendingRenewals[0].CSRName != "before-b" {
		t.Fatalf("pending renewals %+v", ca.Status.PendingRenewals)
	}
	out, err = kubectlRekey(t, srv, "status", "team")
	if err != nil || !strings.Contains(out, "Phase:") || !strings.Contains(out, "Prepared") || !strings.Contains(out, "Not renewed:") || !strings.Contains(out, "before-b") {
		t.Fatalf("kubectl rekey status: %v\n%s", err, out)
	}

	out, err = kubectlRekey(t, srv, "rotate", "complete", "team")
	if err == nil || !strings.Contains(out, "1 certificate(s)") {
		t.Fatalf("Complete with one not renewed: %v\n%s", err, out)
	}
	out, err = kubectlRekey(t, srv, "rotate", "complete", "--force", "team")
	if err != nil {
		t.Fatalf("forced Complete: %v\n%s", err, out)
	}
	ca = waitForPhase(t, client, "team", rotationv1alpha1.PhaseCompleted)
	pool, n = bundlePool(t, ca.Status.TrustBundle)
	type completed struct {
		BundleSize                  int
		Previous                    string // fingerprint
		TrustsBeforeB, TrustsAfterA bool
		CompletionTime              bool // recorded
	}
	if diff := cmp.Diff(completed{BundleSize: 1, TrustsAfterA: true, CompletionTime: true},
		completed{BundleSize: n, Previous: previousFingerprint(ca), TrustsBeforeB: verifies(beforeB, pool), TrustsAfterA: verifies(afterA, pool), CompletionTime: ca.Status.LastCompletionTime != nil}); diff != "" {
		t.Fatalf("after Complete (-want +got):\n%s", diff)
	}
	keys := storedKeys(t, srv, "team")
	if len(keys) != 1 || keys[0] == oldKeys[0] {
		t.Fatalf("keys after the rotation %v; the old one %s must be gone", keys, oldKeys[0])
	}
	// The destroyed key's issuance records went with it (Complete prunes
	// them before it says Completed); the new key's stay.
	byKey := map[string]int{}
	for _, r := range issuanceRecords(t, srv, "") {
		if r.CAName == "team" {
			byKey[r.CAKeyID]++
		}
	}
	if byKey[oldKeys[0]] != 0 || byKey[keys[0]] != 1 {
		t.Fatalf("issuance records of team by key after Complete: %v, want none of %s and after-a's of %s", byKey, oldKeys[0], keys[0])
	}
	out, err = kubectlRekey(t, srv, "bundle", "team")
	if err != nil || out != ca.Status.TrustBundle {
		t.Fatalf("kubectl rekey bundle: %v\n%s", err, out)
	}
	// A new rotation may start again.
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "team", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("Start after Completed: %v", err)
	}
	waitForPhase(t, client, "team", rotationv1alpha1.PhasePrepared)
}

func fingerprint(c *x509.Certificate) string { return signing.Fingerprint(c) }

// previousFingerprint is the fingerprint of the CA's previous certificate,
// "" when it has none.
func previousFingerprint(ca *rotationv1alpha1.CertificateAuthority) string {
	if ca.Status.Previous == nil {
		return ""
	}
	return ca.Status.Previous.Fingerprint
}

// waitForMetrics waits until /metrics has every line (or prefix) given.
func waitForMetrics(t *testing.T, client clientset.Interface, want ...string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, "/metrics has every line wanted", func(ctx context.Context) error {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return err
		}
		var lacks []string
		for _, w := range want {
			if !strings.Contains(string(body), w) {
				lacks = append(lacks, w)
			}
		}
		if len(lacks) > 0 {
			return fmt.Errorf("lacks %q", lacks)
		}
		return nil
	})
}

func waitPending(t *testing.T, client clientset.Interface, name string, want int32) *rotationv1alpha1.CertificateAuthority {
	t.Helper()
	return waitForCA(t, client, name, fmt.Sprintf("%d pending renewals", want), func(ca *rotationv1alpha1.CertificateAuthority) bool {
		return ca.Status.PendingRenewal == want
	})
}

// TestRotationPhasesAreEnforcedWhilePreparing holds a rotation in
// Preparing (a test hook pauses the controller there, before the new key is
// made) to show that neither Complete nor a second Start is accepted then,
// and that the old CA signs on meanwhile: the new one is not trusted yet.
func TestRotationPhasesAreEnforcedWhilePreparing(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandaloneWithEnv(t, t.TempDir(), []string{"REKEY_TEST_PAUSE_AT=preparing-start"})
	client := srv.Client
	ctx := context.Background()
	createCAAndSigner(t, client, "held", rotationv1alpha1.CertificateAuthoritySpec{CommonName: "held CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256})
	oldCA := caOf(t, client, "held")
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "held", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for action, want := range map[rotationv1alpha1.RotationAction]string{
		rotationv1alpha1.RotationComplete: "cannot Complete: phase is Preparing; Complete is allowed only in Prepared",
		rotationv1alpha1.RotationStart:    "cannot Start: phase is Preparing",
	} {
		_, err := client.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "held", &rotationv1alpha1.Rotation{Action: action, Force: action == rotationv1alpha1.RotationComplete}, metav1.CreateOptions{})
		if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s during Preparing: %v", action, err)
		}
	}
	// The old CA signs while the new key is being made (and until the new
	// one is trusted): an approved request is signed by it.
	createAndApprove(t, client, requestFor(t, "old-signs", "example.com/held", fixtures.CSROptions{CommonName: "w"}, certv1alpha1.UsageClientAuth))
	if err := waitForCertificate(t, client, "old-signs").CheckSignatureFrom(oldCA); err != nil {
		t.Fatalf("a request approved during Preparing is not signed by the old CA: %v", err)
	}
	ca, err := client.RotationV1alpha1().CertificateAuthorities().Get(ctx, "held", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ca.Status.Phase != rotationv1alpha1.PhasePreparing || ca.Status.Current.Fingerprint != fingerprint(oldCA) || ca.Status.Next != nil {
		t.Fatalf("paused before the new key: phase %q, current %s (old %s), next %+v", ca.Status.Phase, ca.Status.Current.Fingerprint, fingerprint(oldCA), ca.Status.Next)
	}
}

// TestRotationSurvivesAKillAtEveryStep kills the server with SIGKILL at each
// step of both phases, restarts it, and checks that the rotation ends in
// the right phase with exactly one new key, the old key destroyed once
// completed, and every certificate signed after Prepared from the new CA.
// The Preparing steps: preparing-start (before the next key is made),
// preparing-key-made (the next key in its store, the binding unchanged),
// preparing-bound (the next key promoted in the binding, status not yet
// Prepared). The CA waits for no trust (spec.rotation 0s), so the gate
// between the last two opens at once; a kill while it waits is
// TestTrustGateSurvivesAKillWhileItWaits.
// Each step has its own server and data directory, and the kill comes from
// the server's own hook, not from the test's timing: the steps run in
// parallel (most of each is the restarted server waiting out the killed
// one's lease).
func TestRotationSurvivesAKillAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		step   string
		action rotationv1alpha1.RotationAction
		want   rotationv1alpha1.RotationPhase
	}{
		{"preparing-start", rotationv1alpha1.RotationStart, rotationv1alpha1.PhasePrepared},
		{"preparing-key-made", rotationv1alpha1.RotationStart, rotationv1alpha1.PhasePrepared},
		{"preparing-bound", rotationv1alpha1.RotationStart, rotationv1alpha1.PhasePrepared},
		{"completing-key-deleted", rotationv1alpha1.RotationComplete, rotationv1alpha1.PhaseCompleted},
		{"completing-binding-done", rotationv1alpha1.RotationComplete, rotationv1alpha1.PhaseCompleted},
	} {
		t.Run(tc.step, func(t *testing.T) {
			t.Parallel()
			dataDir := t.TempDir()
			ctx := context.Background()
			first := framework.StartStandalone(t, dataDir)
			createCAAndSigner(t, first.Client, "crash", rotationv1alpha1.CertificateAuthoritySpec{CommonName: "crash CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256, Rotation: framework.ImmediateRotation()})
			oldCA := caOf(t, first.Client, "crash")
			oldKeys := storedKeys(t, first, "crash")
			if tc.action == rotationv1alpha1.RotationComplete {
				if _, err := first.Client.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "crash", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				waitForPhase(t, first.Client, "crash", rotationv1alpha1.PhasePrepared)
			}
			first.Stop(t)

			doomed := framework.StartStandaloneWithEnv(t, dataDir, []string{"REKEY_TEST_KILL_AT=" + tc.step})
			// The controller may act on the stored transition, and the hook
			// kill the process, before the response is written: the call
			// then ends with a broken connection, and what is stored is
			// checked below.
			if _, err := doomed.Client.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "crash", &rotationv1alpha1.Rotation{Action: tc.action, Force: tc.action == rotationv1alpha1.RotationComplete}, metav1.CreateOptions{}); err != nil {
				if apierrors.ReasonForError(err) != metav1.StatusReasonUnknown {
					t.Fatal(err)
				}
				t.Logf("the rotate call ended with %v (the server died answering it)", err)
			}
			framework.Eventually(t, 60*time.Second, "the server dies at "+tc.step, func(context.Context) error {
				if !doomed.Exited() {
					return errors.New("still running")
				}
				return nil
			})
			if !strings.Contains(doomed.Log(), "Test hook: killing the process") {
				t.Fatalf("the server exited, but not at the hook:\n%s", doomed.LogTail(4000))
			}

			again := framework.StartStandalone(t, dataDir)
			ca := waitForPhase(t, again.Client, "crash", tc.want)
			keys := storedKeys(t, again, "crash")
			type stored struct {
				Keys       int
				OldKeyLeft bool
				Previous   string // fingerprint
			}
			// Prepared: the old key and exactly one new one, the old CA
			// previous; Completed: one key, not the old one, no previous.
			want := stored{Keys: 1}
			if tc.want == rotationv1alpha1.PhasePrepared {
				want = stored{Keys: 2, OldKeyLeft: true, Previous: fingerprint(oldCA)}
			}
			if diff := cmp.Diff(want, stored{Keys: len(keys), OldKeyLeft: slices.Contains(keys, oldKeys[0]), Previous: previousFingerprint(ca)}); diff != "" {
				t.Fatalf("after the restart (keys %v, old %v) (-want +got):\n%s", keys, oldKeys, diff)
			}
			createAndApprove(t, again.Client, requestFor(t, "after-"+tc.step, "example.com/crash", fixtures.CSROptions{CommonName: "x"}, certv1alpha1.UsageClientAuth))
			leaf := waitForCertificate(t, again.Client, "after-"+tc.step)
			if leaf.CheckSignatureFrom(oldCA) == nil {
				t.Fatal("a certificate after Start was signed by the old key")
			}
			if err := leaf.CheckSignatureFrom(caOf(t, again.Client, "crash")); err != nil {
				t.Fatalf("a certificate after the restart does not chain to the current CA: %v", err)
			}
		})
	}
}
