package e2e

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/controller/credential"
	"rekey.io/rekey/pkg/standalone"
	"rekey.io/rekey/test/framework"
)

// credentialNamespace makes a namespace where rekey may keep Secrets (the
// RoleBinding an operator makes, artifacts/rbac/credential-rotation.yaml).
func credentialNamespace(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := cluster.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := cluster.Admin.RbacV1().RoleBindings(name).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "rekey-credential-rotator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "rekey:credential-rotator"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "rekey-apiserver", Namespace: "rekey-system"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// newCredential creates the RotatingCredential "cred", retrying while a
// freshly started rekey-apiserver cannot authenticate requests yet.
func newCredential(t *testing.T, ns string, interval, grace time.Duration, minter rotationv1alpha1.Minter) *rotationv1alpha1.RotatingCredential {
	t.Helper()
	var rc *rotationv1alpha1.RotatingCredential
	framework.Eventually(t, settleTimeout, "creating RotatingCredential "+ns+"/cred", func(ctx context.Context) error {
		var err error
		rc, err = cluster.RekeyAdmin.RotationV1alpha1().RotatingCredentials(ns).Create(context.Background(), &rotationv1alpha1.RotatingCredential{
			ObjectMeta: metav1.ObjectMeta{Name: "cred"},
			Spec: rotationv1alpha1.RotatingCredentialSpec{SecretRef: rotationv1alpha1.SecretReference{Name: "cred"},
				RotationInterval: &metav1.Duration{Duration: interval}, GracePeriod: &metav1.Duration{Duration: grace}, Minter: minter},
		}, metav1.CreateOptions{})
		return err
	})
	return rc
}

// waitSecret waits until the credential's Secret satisfies ok.
func waitSecret(t *testing.T, ns, what string, timeout time.Duration, ok func(*corev1.Secret) bool) *corev1.Secret {
	t.Helper()
	var s *corev1.Secret
	err := framework.EventuallyErr(timeout, func(ctx context.Context) error {
		var err error
		if s, err = cluster.Admin.CoreV1().Secrets(ns).Get(ctx, "cred", metav1.GetOptions{}); err != nil {
			return err
		}
		if !ok(s) {
			return fmt.Errorf("generation %d", generation(s))
		}
		return nil
	})
	if err != nil {
		// The credential's status says why, read once, not at every look.
		rc, _ := cluster.RekeyAdmin.RotationV1alpha1().RotatingCredentials(ns).Get(context.Background(), "cred", metav1.GetOptions{})
		t.Fatalf("Secret %s/cred never %s: %v; RotatingCredential status %+v", ns, what, err, rc.Status)
	}
	return s
}

func generation(s *corev1.Secret) int64 {
	n, _ := strconv.ParseInt(s.Annotations[credential.AnnotationGeneration], 10, 64)
	return n
}

func authenticates(t *testing.T, token []byte) bool {
	t.Helper()
	review, err := cluster.Admin.AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: string(token)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return review.Status.Authenticated
}

// TestServiceAccountTokenRotation: with a 30s interval and a 20s grace
// period, tokens rotate; during each grace period the Secret holds the old
// and the new token and both authenticate; after it the old one is gone
// from the Secret and kube-apiserver refuses it.
func TestServiceAccountTokenRotation(t *testing.T) {
	t.Parallel()
	ns := credentialNamespace(t, "rcred-sa")
	if _, err := cluster.Admin.CoreV1().ServiceAccounts(ns).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newCredential(t, ns, 30*time.Second, 20*time.Second, rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterServiceAccountToken,
		ServiceAccountToken: &rotationv1alpha1.ServiceAccountTokenMinter{ServiceAccountName: "app"}})
	s := waitSecret(t, ns, "minted", 30*time.Second, func(s *corev1.Secret) bool { return generation(s) == 1 })
	previous := s.Data["token"]
	if !authenticates(t, previous) {
		t.Fatal("the first token does not authenticate")
	}
	for gen := int64(2); gen <= 3; gen++ {
		s = waitSecret(t, ns, fmt.Sprintf("rotated to generation %d", gen), 60*time.Second, func(s *corev1.Secret) bool { return generation(s) == gen })
		current := s.Data["token"]
		if string(s.Data["token.old"]) != string(previous) || string(current) == string(previous) {
			t.Fatalf("generation %d: the grace period's Secret does not hold the old and the new token", gen)
		}
		if !authenticates(t, previous) || !authenticates(t, current) {
			t.Fatalf("generation %d: during the grace period the old and the new token must both authenticate", gen)
		}
		waitSecret(t, ns, "without the old token", 40*time.Second, func(s *corev1.Secret) bool { return s.Data["token.old"] == nil })
		if authenticates(t, previous) {
			t.Fatalf("generation %d: the old token still authenticates after the grace period", gen)
		}
		if !authenticates(t, current) {
			t.Fatalf("generation %d: the current token does not authenticate", gen)
		}
		previous = current
	}
}

// webhookServer is an external credential system: it mints a password per
// call and records mint and revoke in order; fail and hang make it answer
// 500 or nothing.
type webhookServer struct {
	*httptest.Server
	mu         sync.Mutex
	calls      []string
	active     map[string]int64 // password -> generation
	fail, hang bool
}

func newWebhookServer(t *testing.T) *webhookServer {
	w := &webhookServer{active: map[string]int64{}}
	w.Server = httptest.NewTLSServer(http.HandlerFunc(w.serve))
	t.Cleanup(w.Close)
	return w
}

func (w *webhookServer) serve(rw http.ResponseWriter, r *http.Request) {
	var req credential.WebhookRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(rw, "bad request", http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	hang, fail := w.hang, w.fail
	w.mu.Unlock()
	if hang {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if fail {
		w.calls = append(w.calls, "failed "+req.Operation)
		http.Error(rw, "unavailable", http.StatusInternalServerError)
		return
	}
	w.calls = append(w.calls, fmt.Sprintf("%s %d", req.Operation, req.Generation))
	switch req.Operation {
	case "mint":
		password := fmt.Sprintf("g%d-%d", req.Generation, time.Now().UnixNano())
		w.active[password] = req.Generation
		_ = json.NewEncoder(rw).Encode(credential.WebhookResponse{Data: map[string][]byte{"password": []byte(password)}})
	case "revoke":
		for p, g := range w.active {
			if g == req.Generation {
				delete(w.active, p)
			}
		}
	}
}

func (w *webhookServer) set(fail, hang bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fail, w.hang = fail, hang
}

// succeeded is the calls that got through, in order.
func (w *webhookServer) succeeded() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, c := range w.calls {
		if !strings.HasPrefix(c, "failed") {
			out = append(out, c)
		}
	}
	return out
}

func (w *webhookServer) minter(timeout int32) rotationv1alpha1.Minter {
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: w.Certificate().Raw})
	return rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterWebhook, Webhook: &rotationv1alpha1.WebhookMinter{URL: w.URL, CABundle: caPEM, TimeoutSeconds: &timeout}}
}

func waitDegraded(t *testing.T, ns, reason string) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, "Degraded "+reason, func(ctx context.Context) error {
		rc, err := cluster.RekeyAdmin.RotationV1alpha1().RotatingCredentials(ns).Get(ctx, "cred", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(rc.Status.Conditions, credential.ConditionDegraded); c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason {
			return fmt.Errorf("conditions %+v", rc.Status.Conditions)
		}
		return nil
	})
}

// TestWebhookRotation: mint and revoke reach the webhook in order; a
// webhook that fails or times out gives Degraded with the reason and the
// current credential stays; deleting the Secret by hand mints again.
func TestWebhookRotation(t *testing.T) {
	t.Parallel()
	ns := credentialNamespace(t, "rcred-webhook")
	hook := newWebhookServer(t)
	newCredential(t, ns, 30*time.Second, 20*time.Second, hook.minter(2))
	first := waitSecret(t, ns, "minted", 30*time.Second, func(s *corev1.Secret) bool { return generation(s) == 1 }).Data["password"]

	// kubectl rekey shows the names of the Secret's keys, never a value,
	// and refuses a Complete outside a grace period naming the phase.
	plugin := framework.Binary(t, "kubectl-rekey")
	env := []string{"PATH=" + filepath.Dir(plugin) + string(os.PathListSeparator) + os.Getenv("PATH")}
	out, errOut, err := framework.RunKubectlWithEnv(t, cluster.AdminKubeconfig, env, nil, "rekey", "status", "rcred/cred", "-n", ns)
	if err != nil || !strings.Contains(out, "Generation:") || !strings.Contains(out, "keys: password") || strings.Contains(out, string(first)) {
		t.Fatalf("kubectl rekey status rcred/cred: %v\n%s%s", err, out, errOut)
	}
	_, errOut, err = framework.RunKubectlWithEnv(t, cluster.AdminKubeconfig, env, nil, "rekey", "rotate", "complete", "rcred/cred", "-n", ns)
	if err == nil || !strings.Contains(errOut, "phase is") {
		t.Fatalf("kubectl rekey rotate complete outside a grace period: %v\n%s", err, errOut)
	}

	hook.set(true, false)
	waitDegraded(t, ns, "WebhookFailed")
	hook.set(false, true)
	waitDegraded(t, ns, "WebhookTimeout")
	s := waitSecret(t, ns, "read", time.Second, func(*corev1.Secret) bool { return true })
	if generation(s) != 1 || string(s.Data["password"]) != string(first) {
		t.Fatal("a failing webhook changed the current credential")
	}
	hook.set(false, false)
	waitSecret(t, ns, "rotated", 60*time.Second, func(s *corev1.Secret) bool { return generation(s) == 2 })
	waitSecret(t, ns, "without the old password", 40*time.Second, func(s *corev1.Secret) bool { return s.Data["password.old"] == nil })
	// The revocation is recorded in status after the Secret loses its .old
	// keys: a Secret deleted in between makes rekey revoke generation 1
	// again (the protocol allows it), so wait until it is recorded.
	framework.Eventually(t, 30*time.Second, "the revocation of generation 1 recorded", func(ctx context.Context) error {
		rc, err := cluster.RekeyAdmin.RotationV1alpha1().RotatingCredentials(ns).Get(ctx, "cred", metav1.GetOptions{})
		if err != nil {
			return err
		}
		return phaseDiff(rc.Status, 2, rotationv1alpha1.CredentialCompleted)
	})

	if err := cluster.Admin.CoreV1().Secrets(ns).Delete(context.Background(), "cred", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSecret(t, ns, "minted again", 30*time.Second, func(s *corev1.Secret) bool { return generation(s) == 3 && s.Data["password"] != nil })
	framework.Eventually(t, 40*time.Second, "the webhook's calls", func(context.Context) error {
		if diff := cmp.Diff([]string{"mint 1", "mint 2", "revoke 1", "mint 3", "revoke 2"}, hook.succeeded()); diff != "" {
			return fmt.Errorf("(-want +got):\n%s", diff)
		}
		return nil
	})
}

// TestClientCertificateRotation: the current tls.crt and tls.key
// authenticate to kube-apiserver as the common name, before and after a
// rotation of the signer's CA, which renews the certificate at once.
func TestClientCertificateRotation(t *testing.T) {
	ns := credentialNamespace(t, "rcred-cert")
	const caName = "rekey.io-kube-apiserver-client"
	newCredential(t, ns, 10*time.Minute, 20*time.Second, rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterClientCertificate,
		ClientCertificate: &rotationv1alpha1.ClientCertificateMinter{SignerName: "rekey.io/kube-apiserver-client", CommonName: "rcred-app", Organizations: []string{"rcred-e2e"}}})
	s := waitSecret(t, ns, "minted", 60*time.Second, func(s *corev1.Secret) bool { return generation(s) == 1 })
	if len(s.Data["ca.crt"]) == 0 {
		t.Fatal("no ca.crt")
	}
	if err := cluster.TrustClientCAs(s.Data["ca.crt"]); err != nil {
		t.Fatal(err)
	}
	whoAmIWith := func(s *corev1.Secret) string {
		path := filepath.Join(t.TempDir(), "kubeconfig")
		if err := standalone.WriteKubeconfig(path, cluster.KubeAPIURL, cluster.ServingCA.CertPEM(), "rcred-app", s.Data["tls.crt"], s.Data["tls.key"]); err != nil {
			t.Fatal(err)
		}
		return whoAmI(t, path)
	}
	if got := whoAmIWith(s); got != "rcred-app" {
		t.Fatalf("before the CA rotation kube-apiserver sees %q", got)
	}
	ctx := context.Background()
	// The new CA signs (and the credential renews) once published: no
	// trustPropagation to wait out.
	if err := framework.SetImmediateRotation(ctx, cluster.RekeyAdmin, caName); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, caName, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s = waitSecret(t, ns, "renewed under the new CA", 90*time.Second, func(s *corev1.Secret) bool { return generation(s) == 2 })
	if err := cluster.TrustClientCAs(s.Data["ca.crt"]); err != nil {
		t.Fatal(err)
	}
	if got := whoAmIWith(s); got != "rcred-app" {
		t.Fatalf("after the CA rotation started kube-apiserver sees %q", got)
	}
	waitCAPhase(t, caName, rotationv1alpha1.PhasePrepared)
	if _, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, caName, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete, Force: true}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca := waitCAPhase(t, caName, rotationv1alpha1.PhaseCompleted)
	if err := cluster.TrustClientCAs([]byte(ca.Status.TrustBundle)); err != nil {
		t.Fatal(err)
	}
	s = waitSecret(t, ns, "read", time.Second, func(*corev1.Secret) bool { return true })
	if got := whoAmIWith(s); got != "rcred-app" {
		t.Fatalf("after the CA rotation completed kube-apiserver sees %q", got)
	}
}

// TestCredentialRotationSurvivesSIGKILL: rekey-apiserver is killed with
// SIGKILL after every step of a rotation (a test hook pauses it there) and
// started again; the rotation still ends with exactly one current
// credential, the one in the Secret, none lost, and no revoke of a
// credential that was current.
func TestCredentialRotationSurvivesSIGKILL(t *testing.T) {
	ns := credentialNamespace(t, "rcred-crash")
	hook := newWebhookServer(t)
	pauseDir := t.TempDir()
	env := []string{"REKEY_TEST_CREDENTIAL_PAUSE_DIR=" + pauseDir}
	if err := cluster.RestartRekeyWithEnv(env); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.RestartRekey(); err != nil {
			t.Errorf("restarting rekey without the hook: %v", err)
		}
	})
	newCredential(t, ns, 30*time.Second, 20*time.Second, hook.minter(5))
	kills := 0
	seen := map[string]bool{}
	// Each look either finds the rotation finished, or kills and restarts
	// rekey if it paused after a step since the last look.
	err := framework.EventuallyErr(5*time.Minute, func(ctx context.Context) error {
		s, err := cluster.Admin.CoreV1().Secrets(ns).Get(ctx, "cred", metav1.GetOptions{})
		rc, rcErr := cluster.RekeyAdmin.RotationV1alpha1().RotatingCredentials(ns).Get(ctx, "cred", metav1.GetOptions{})
		if err == nil && rcErr == nil && generation(s) == 2 && s.Data["password.old"] == nil && rc.Status.Phase == rotationv1alpha1.CredentialCompleted {
			return nil
		}
		entries, _ := os.ReadDir(pauseDir)
		paused := false
		for _, e := range entries {
			if !seen[e.Name()] {
				seen[e.Name()] = true
				paused = true
				t.Logf("paused after %s", e.Name())
			}
		}
		if paused {
			// Every step is followed by a kill; the new process numbers its
			// steps from 1 again.
			for _, e := range entries {
				_ = os.Remove(filepath.Join(pauseDir, e.Name()))
			}
			seen = map[string]bool{}
			cluster.KillRekey()
			kills++
			if err := cluster.RestartRekeyWithEnv(env); err != nil {
				return framework.Permanent(fmt.Errorf("restarting rekey after kill %d: %w", kills, err))
			}
		}
		return fmt.Errorf("not finished after %d kills", kills)
	})
	if err != nil {
		t.Fatalf("the rotation did not finish: %v; webhook calls %v", err, hook.succeeded())
	}
	if kills < 5 {
		t.Fatalf("only %d kills: the hook did not pause after every step", kills)
	}
	s := waitSecret(t, ns, "read", time.Second, func(*corev1.Secret) bool { return true })
	hook.mu.Lock()
	defer hook.mu.Unlock()
	// Exactly one current credential: the webhook's only unrevoked one is
	// the Secret's (a mint repeated after a kill is revoked with its
	// generation, never left behind).
	if len(hook.active) != 1 {
		t.Fatalf("the webhook holds %d unrevoked credentials, want 1: %v (calls %v)", len(hook.active), hook.active, hook.calls)
	}
	for password, gen := range hook.active {
		if string(s.Data["password"]) != password || gen != 2 {
			t.Fatalf("the Secret's credential is not the unrevoked one (generation %d)", gen)
		}
	}
	// No revoke of a credential still current: generation 1 was revoked
	// only after generation 2 was minted, and generation 2 never.
	mint2, revoke1 := -1, -1
	for i, c := range hook.calls {
		if c == "mint 2" && mint2 < 0 {
			mint2 = i
		}
		if c == "revoke 1" && revoke1 < 0 {
			revoke1 = i
		}
		if c == "revoke 2" {
			t.Fatalf("the current generation was revoked: %v", hook.calls)
		}
	}
	if mint2 < 0 || revoke1 < mint2 {
		t.Fatalf("calls out of order: %v", hook.calls)
	}
	t.Logf("%d kills; webhook calls %v", kills, hook.calls)
}

// credentialAt is the part of a RotatingCredential's status that says
// where its rotation is.
type credentialAt struct {
	Generation int64
	Phase      rotationv1alpha1.CredentialPhase
}

// phaseDiff says how status differs from generation gen in phase.
func phaseDiff(status rotationv1alpha1.RotatingCredentialStatus, gen int64, phase rotationv1alpha1.CredentialPhase) error {
	if diff := cmp.Diff(credentialAt{gen, phase}, credentialAt{status.CredentialGeneration, status.Phase}); diff != "" {
		return fmt.Errorf("status (-want +got):\n%s", diff)
	}
	return nil
}

// credentialStatus reads the RotatingCredential "cred".
func credentialStatus(t *testing.T, ns string) rotationv1alpha1.RotatingCredentialStatus {
	t.Helper()
	rc, err := cluster.RekeyAdmin.RotationV1alpha1().RotatingCredentials(ns).Get(context.Background(), "cred", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return rc.Status
}

// TestRotateStartAndCompleteRotateOnce, through kube-apiserver: a /rotate
// Start makes exactly one new generation (the mint falls in the Start's
// second, which the times compared to the second took for an unserved
// request: a second generation came at the end of the grace period), and
// a Complete sent right after it revokes the previous generation only,
// never the one Start just minted (its ServiceAccount token went on
// authenticating).
func TestRotateStartAndCompleteRotateOnce(t *testing.T) {
	t.Parallel()
	ns := credentialNamespace(t, "rcred-rotate")
	if _, err := cluster.Admin.CoreV1().ServiceAccounts(ns).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const grace = 8 * time.Second
	newCredential(t, ns, 10*time.Minute, grace, rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterServiceAccountToken,
		ServiceAccountToken: &rotationv1alpha1.ServiceAccountTokenMinter{ServiceAccountName: "app"}})
	waitSecret(t, ns, "minted", 30*time.Second, func(s *corev1.Secret) bool { return generation(s) == 1 })
	rotate := func(action rotationv1alpha1.RotationAction) {
		t.Helper()
		framework.Eventually(t, settleTimeout, "rotate "+string(action), func(ctx context.Context) error {
			_, err := cluster.RekeyAdmin.RotationV1alpha1().RotatingCredentials(ns).Rotate(context.Background(), "cred", &rotationv1alpha1.Rotation{Action: action}, metav1.CreateOptions{})
			return err
		})
	}
	waitPhase := func(gen int64, phase rotationv1alpha1.CredentialPhase) {
		t.Helper()
		framework.Eventually(t, settleTimeout, fmt.Sprintf("generation %d phase %q", gen, phase), func(ctx context.Context) error {
			rc, err := cluster.RekeyAdmin.RotationV1alpha1().RotatingCredentials(ns).Get(ctx, "cred", metav1.GetOptions{})
			if err != nil {
				return err
			}
			return phaseDiff(rc.Status, gen, phase)
		})
	}
	waitPhase(1, rotationv1alpha1.CredentialPhaseNone)

	// Start alone: one new generation, and none after its grace period.
	rotate(rotationv1alpha1.RotationStart)
	waitPhase(2, rotationv1alpha1.CredentialRotating)
	waitPhase(2, rotationv1alpha1.CredentialCompleted)
	framework.Stays(t, 2*grace, "one Start makes one generation", func(ctx context.Context) error {
		if st := credentialStatus(t, ns); st.CredentialGeneration != 2 {
			return fmt.Errorf("one Start made generation %d", st.CredentialGeneration)
		}
		return nil
	})

	// Start, then Complete as soon as the grace period shows.
	rotate(rotationv1alpha1.RotationStart)
	waitPhase(3, rotationv1alpha1.CredentialRotating)
	rotate(rotationv1alpha1.RotationComplete)
	waitPhase(3, rotationv1alpha1.CredentialCompleted)
	s := waitSecret(t, ns, "without the old token", 10*time.Second, func(s *corev1.Secret) bool { return s.Data["token.old"] == nil })
	framework.Stays(t, 2*grace, "Start and Complete make one generation and keep its token", func(ctx context.Context) error {
		if st := credentialStatus(t, ns); st.CredentialGeneration != 3 {
			return fmt.Errorf("Start and Complete made generation %d", st.CredentialGeneration)
		}
		if !authenticates(t, s.Data["token"]) {
			return errors.New("the token Start minted was revoked")
		}
		return nil
	})
}

// TestSecretLabelledByHandIsNotTakenOver: a Secret a user made with
// rekey's label (and annotations copied from one of rekey's) is never
// written by rekey: Degraded SecretNotManaged, its data as the user wrote
// it. Once the user deletes it, the watch of the namespace's labelled
// Secrets brings rekey's own within seconds (the refusal's own retry is
// five minutes away, the rotation ten).
func TestSecretLabelledByHandIsNotTakenOver(t *testing.T) {
	t.Parallel()
	ns := credentialNamespace(t, "rcred-takeover")
	mine := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cred", Labels: map[string]string{credential.LabelManagedBy: credential.ManagedBy},
		Annotations: map[string]string{credential.AnnotationGeneration: "1"}}, Data: map[string][]byte{"token": []byte("the user's own")}}
	if _, err := cluster.Admin.CoreV1().Secrets(ns).Create(context.Background(), mine, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newCredential(t, ns, 10*time.Minute, time.Minute, rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterRandom,
		Random: &rotationv1alpha1.RandomMinter{Key: "token", Length: 32}})
	waitDegraded(t, ns, "SecretNotManaged")
	framework.Stays(t, 2*time.Second, "the user's Secret stays as the user wrote it", func(ctx context.Context) error {
		s, err := cluster.Admin.CoreV1().Secrets(ns).Get(ctx, "cred", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if string(s.Data["token"]) != "the user's own" || len(s.Data) != 1 || s.Annotations[credential.AnnotationOwner] != "" {
			return fmt.Errorf("rekey wrote into the user's Secret: %v", s.Annotations)
		}
		return nil
	})
	if err := cluster.Admin.CoreV1().Secrets(ns).Delete(context.Background(), "cred", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s := waitSecret(t, ns, "created by rekey after the user's was deleted", 15*time.Second, func(s *corev1.Secret) bool {
		return generation(s) == 1 && len(s.Data["token"]) == 43
	})
	framework.Eventually(t, settleTimeout, "status recording the new Secret's UID", func(ctx context.Context) error {
		if st := credentialStatus(t, ns); st.SecretUID != s.UID {
			return fmt.Errorf("status records Secret UID %q, the Secret has %q", st.SecretUID, s.UID)
		}
		return nil
	})
	// Deleted by hand: back within seconds.
	if err := cluster.Admin.CoreV1().Secrets(ns).Delete(context.Background(), "cred", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSecret(t, ns, "made again after a deletion", 15*time.Second, func(s *corev1.Secret) bool { return generation(s) == 2 })
}

// TestHangingWebhooksDoNotDelayOtherMinters: twenty RotatingCredentials
// whose webhook accepts calls and never answers (until the test ends) do
// not delay a Random credential, nor a /rotate Complete revocation of
// another credential: both finish while the webhook still holds calls.
func TestHangingWebhooksDoNotDelayOtherMinters(t *testing.T) {
	t.Parallel()
	ns := credentialNamespace(t, "rcred-isolation")
	var holding atomic.Int64
	release := make(chan struct{})
	hanging := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		holding.Add(1)
		defer holding.Add(-1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); hanging.Close() })
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hanging.Certificate().Raw})
	timeout := int32(30)
	ctx := context.Background()
	create := func(name string, minter rotationv1alpha1.Minter, grace time.Duration) {
		t.Helper()
		framework.Eventually(t, settleTimeout, "creating RotatingCredential "+name, func(ctx context.Context) error {
			_, err := cluster.RekeyAdmin.RotationV1alpha1().RotatingCredentials(ns).Create(ctx, &rotationv1alpha1.RotatingCredential{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: rotationv1alpha1.RotatingCredentialSpec{SecretRef: rotationv1alpha1.SecretReference{Name: name},
					RotationInterval: &metav1.Duration{Duration: time.Hour}, GracePeriod: &metav1.Duration{Duration: grace}, Minter: minter},
			}, metav1.CreateOptions{})
			return err
		})
	}
	random := rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterRandom, Random: &rotationv1alpha1.RandomMinter{Key: "token", Length: 32}}
	// "leaked" is in a grace period before the webhooks hang.
	create("leaked", random, 30*time.Minute)
	rotateLeaked := func(action rotationv1alpha1.RotationAction) {
		framework.Eventually(t, settleTimeout, "rotate "+string(action)+" of leaked", func(ctx context.Context) error {
			_, err := cluster.RekeyAdmin.RotationV1alpha1().RotatingCredentials(ns).Rotate(ctx, "leaked", &rotationv1alpha1.Rotation{Action: action}, metav1.CreateOptions{})
			return err
		})
	}
	framework.Eventually(t, settleTimeout, "leaked minted", func(ctx context.Context) error {
		if rc, err := cluster.RekeyAdmin.RotationV1alpha1().RotatingCredentials(ns).Get(ctx, "leaked", metav1.GetOptions{}); err != nil || rc.Status.CredentialGeneration != 1 {
			return fmt.Errorf("leaked not minted yet: %v", err)
		}
		return nil
	})
	rotateLeaked(rotationv1alpha1.RotationStart)
	framework.Eventually(t, settleTimeout, "leaked rotating", func(ctx context.Context) error {
		if rc, err := cluster.RekeyAdmin.RotationV1alpha1().RotatingCredentials(ns).Get(ctx, "leaked", metav1.GetOptions{}); err != nil || rc.Status.Phase != rotationv1alpha1.CredentialRotating {
			return fmt.Errorf("leaked not rotating yet: %v", err)
		}
		return nil
	})

	for i := 0; i < 20; i++ {
		create(fmt.Sprintf("hook-%d", i), rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterWebhook,
			Webhook: &rotationv1alpha1.WebhookMinter{URL: hanging.URL, CABundle: caPEM, TimeoutSeconds: &timeout}}, time.Minute)
	}
	framework.Eventually(t, settleTimeout, "the hanging webhook holding a call", func(ctx context.Context) error {
		if n := holding.Load(); n == 0 {
			return errors.New("the webhook holds no call yet")
		}
		return nil
	})
	start := time.Now()
	create("random", random, time.Minute)
	rotateLeaked(rotationv1alpha1.RotationComplete)
	secret := func(name string) *corev1.Secret {
		s, err := cluster.Admin.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return s
	}
	var mintedAfter, revokedAfter time.Duration
	err := framework.EventuallyErr(25*time.Second, func(context.Context) error {
		if s := secret("random"); mintedAfter == 0 && s != nil && generation(s) == 1 {
			mintedAfter = time.Since(start)
		}
		if s := secret("leaked"); revokedAfter == 0 && s != nil && generation(s) == 2 && s.Data["token.old"] == nil {
			revokedAfter = time.Since(start)
		}
		if mintedAfter == 0 || revokedAfter == 0 {
			return errors.New("not both done yet")
		}
		return nil
	})
	held := holding.Load()
	t.Logf("with 20 hanging webhooks: Random minted after %v, the revocation done after %v; calls the webhook held then: %d", mintedAfter, revokedAfter, held)
	if err != nil {
		t.Fatalf("while 20 webhooks hung: Random minted after %v, revocation after %v (0: not yet)", mintedAfter, revokedAfter)
	}
	if held == 0 {
		t.Fatal("the webhook held no call when the others finished: they waited for it")
	}
}
