package credential

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
)

type harness struct {
	t       *testing.T
	c       *Controller
	client  *fake.Clientset
	kube    *kubefake.Clientset
	clock   *clocktesting.FakeClock
	indexer cache.Indexer
	steps   []StepKind
	uids    atomic.Int64
}

func newHarness(t *testing.T, rc *rotationv1alpha1.RotatingCredential, minter Minter) *harness {
	h := &harness{t: t, client: fake.NewSimpleClientset(rc), kube: kubefake.NewSimpleClientset(), clock: clocktesting.NewFakeClock(t0),
		indexer: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})}
	h.c = &Controller{client: h.client, kube: h.kube, clock: h.clock,
		creds:   rotationlisters.NewRotatingCredentialLister(h.indexer),
		cas:     rotationlisters.NewCertificateAuthorityLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})),
		signers: certlisters.NewSignerLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})),
		minters: map[rotationv1alpha1.MinterType]Minter{rc.Spec.Minter.Type: minter},
		// The steps one after the other in settle; lanes have their own test.
		inline: true,
	}
	h.c.calls = newCalls(func(string) {})
	// kube-apiserver gives every object a UID; the fake does not.
	h.kube.PrependReactor("create", "secrets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		s := a.(clienttesting.CreateAction).GetObject().(*corev1.Secret)
		s.UID = types.UID("uid-" + s.Name + "-" + strconv.Itoa(int(h.uids.Add(1))))
		return false, nil, nil
	})
	h.c.afterStep = func(s StepKind) { h.steps = append(h.steps, s) }
	h.refresh()
	return h
}

// refresh puts the stored RotatingCredential into the lister, as the
// informer would.
func (h *harness) refresh() *rotationv1alpha1.RotatingCredential {
	rc, err := h.client.RotationV1alpha1().RotatingCredentials("team").Get(context.Background(), "db", metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.indexer.Update(rc); err != nil {
		h.t.Fatal(err)
	}
	return rc
}

// settle syncs until the controller waits or fails, and returns how long
// it waits.
func (h *harness) settle() (time.Duration, error) {
	for i := 0; i < 20; i++ {
		after, err := h.c.sync(context.Background(), "team/db")
		h.refresh()
		if err != nil || after > time.Millisecond {
			return after, err
		}
	}
	h.t.Fatal("no rest after 20 steps")
	return 0, nil
}

func (h *harness) secretData() map[string][]byte {
	s, err := h.kube.CoreV1().Secrets("team").Get(context.Background(), "db", metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return s.Data
}

// TestRotationWithARandomMinter: mint, wait exactly the interval, keep the
// previous token as token.old through the grace period, then drop it.
func TestRotationWithARandomMinter(t *testing.T) {
	h := newHarness(t, newRC(), RandomMinter{})
	after, err := h.settle()
	if err != nil || after != time.Hour {
		t.Fatalf("after the first mint: wait %v, %v", after, err)
	}
	first := h.secretData()["token"]
	if len(first) != 43 || len(h.secretData()) != 1 {
		t.Fatalf("Secret %v", h.secretData())
	}
	rc := h.refresh()
	if rc.Status.CredentialGeneration != 1 || !meta.IsStatusConditionTrue(rc.Status.Conditions, ConditionReady) || rc.Status.NextRotationTime == nil || !rc.Status.NextRotationTime.Time.Equal(t0.Add(time.Hour)) {
		t.Fatalf("status %+v", rc.Status)
	}

	h.clock.SetTime(t0.Add(time.Hour))
	h.steps = nil
	after, err = h.settle()
	if err != nil || after != 10*time.Minute {
		t.Fatalf("after the rotation: wait %v, %v", after, err)
	}
	data := h.secretData()
	if string(data["token.old"]) != string(first) || string(data["token"]) == string(first) || len(data) != 2 {
		t.Fatalf("during the grace period the Secret has %d keys", len(data))
	}
	if rc := h.refresh(); rc.Status.Phase != rotationv1alpha1.CredentialRotating || rc.Status.CredentialGeneration != 2 || rc.Status.GraceEndsTime == nil {
		t.Fatalf("status %+v", rc.Status)
	}
	if strings.Join(stepNames(h.steps), ",") != "CopyOld,Mint,Record" {
		t.Fatalf("steps %v", h.steps)
	}

	h.clock.SetTime(t0.Add(time.Hour + 10*time.Minute))
	after, err = h.settle()
	if err != nil || after != 50*time.Minute {
		t.Fatalf("after the grace period: wait %v, %v", after, err)
	}
	if data := h.secretData(); len(data) != 1 || data["token.old"] != nil {
		t.Fatalf("the .old key stayed: %d keys", len(data))
	}
	if rc := h.refresh(); rc.Status.Phase != rotationv1alpha1.CredentialCompleted {
		t.Fatalf("status %+v", rc.Status)
	}
}

func stepNames(steps []StepKind) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = string(s)
	}
	return out
}

// A webhook that fails: Degraded with the reason, the current credential
// stays, and nothing of the response shows in status.
func TestFailingWebhookKeepsTheCurrentCredential(t *testing.T) {
	var mu sync.Mutex
	var ops []string
	fail := false
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req WebhookRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		defer mu.Unlock()
		ops = append(ops, req.Operation)
		if fail {
			http.Error(w, "secret-looking body s3cr3t", http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(WebhookResponse{Data: map[string][]byte{"password": []byte("gen-" + strings.Repeat("x", int(req.Generation)))}})
	}))
	defer srv.Close()
	rc := newRC()
	rc.Spec.Minter = rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterWebhook, Webhook: &rotationv1alpha1.WebhookMinter{URL: srv.URL}}
	h := newHarness(t, rc, WebhookMinter{Transport: srv.Client().Transport})
	if _, err := h.settle(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	fail = true
	mu.Unlock()
	h.clock.SetTime(t0.Add(time.Hour))
	_, err := h.settle()
	if err == nil {
		t.Fatal("a failing webhook did not fail the step")
	}
	rc = h.refresh()
	degraded := meta.FindStatusCondition(rc.Status.Conditions, ConditionDegraded)
	if degraded == nil || degraded.Status != metav1.ConditionTrue || degraded.Reason != "WebhookFailed" || strings.Contains(degraded.Message, "s3cr3t") {
		t.Fatalf("Degraded %+v", degraded)
	}
	if data := h.secretData(); string(data["password"]) != "gen-x" || rc.Status.CredentialGeneration != 1 {
		t.Fatalf("the current credential did not stay: generation %d", rc.Status.CredentialGeneration)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	h.clock.SetTime(t0.Add(time.Hour + 10*time.Minute))
	if _, err := h.settle(); err != nil {
		t.Fatal(err)
	}
	h.clock.SetTime(t0.Add(time.Hour + 20*time.Minute))
	if _, err := h.settle(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(ops, ",") != "mint,mint,mint,revoke" {
		t.Fatalf("webhook calls %v", ops)
	}
	if rc := h.refresh(); meta.IsStatusConditionTrue(rc.Status.Conditions, ConditionDegraded) || rc.Status.CredentialGeneration != 2 {
		t.Fatalf("status after recovery %+v", rc.Status)
	}
}

// A Secret a user made with rekey's label (and even its annotations) is
// never written: Degraded SecretNotManaged, its data and metadata as they
// were.
func TestSecretLabelledByHandIsNotTakenOver(t *testing.T) {
	h := newHarness(t, newRC(), RandomMinter{})
	mine := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "team", UID: "made-by-a-user",
		Labels: map[string]string{LabelManagedBy: ManagedBy}, Annotations: map[string]string{AnnotationOwner: "uid-1"}},
		Data: map[string][]byte{"token": []byte("the user's")}}
	if _, err := h.kube.CoreV1().Secrets("team").Create(context.Background(), mine, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.settle(); err != nil {
		t.Fatal(err)
	}
	s, err := h.kube.CoreV1().Secrets("team").Get(context.Background(), "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Data["token"]) != "the user's" || len(s.Data) != 1 || s.Annotations[AnnotationGeneration] != "" {
		t.Fatalf("the user's Secret was written: %v", s.Annotations)
	}
	rc := h.refresh()
	if c := meta.FindStatusCondition(rc.Status.Conditions, ConditionDegraded); c == nil || c.Reason != "SecretNotManaged" || rc.Status.CredentialGeneration != 0 {
		t.Fatalf("status %+v", rc.Status)
	}
}

// revokeRecorder is a Random minter that records its revocations.
type revokeRecorder struct {
	RandomMinter
	mu      sync.Mutex
	revoked []int64
}

func (m *revokeRecorder) Revoke(_ context.Context, _ *rotationv1alpha1.RotatingCredential, generation int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.revoked = append(m.revoked, generation)
	return nil
}

// inGracePeriodOfGeneration1 settles a credential, then an hour later
// settles it again: generation 2 is minted and 1 waits out its grace
// period.
func inGracePeriodOfGeneration1(t *testing.T, m *revokeRecorder) *harness {
	t.Helper()
	h := newHarness(t, newRC(), m)
	if _, err := h.settle(); err != nil {
		t.Fatal(err)
	}
	h.clock.SetTime(t0.Add(time.Hour))
	if _, err := h.settle(); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestSecretDeletedDuringAGracePeriodForgetsNoGeneration: generation 1,
// in its grace period, is named only by the Secret's old-generation
// annotation and by status (phase Rotating at 2). The Secret deleted, rekey
// revokes 1 at once, then mints 3 with 2 to revoke after its grace
// period: every generation but the current one is revoked.
func TestSecretDeletedDuringAGracePeriodForgetsNoGeneration(t *testing.T) {
	m := &revokeRecorder{}
	h := inGracePeriodOfGeneration1(t, m)
	if rc := h.refresh(); rc.Status.Phase != rotationv1alpha1.CredentialRotating || rc.Status.CredentialGeneration != 2 {
		t.Fatalf("not in the grace period of generation 1: %+v", rc.Status)
	}
	if err := h.kube.CoreV1().Secrets("team").Delete(context.Background(), "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.clock.SetTime(t0.Add(time.Hour + time.Minute))
	if _, err := h.settle(); err != nil {
		t.Fatal(err)
	}
	rc := h.refresh()
	if rc.Status.CredentialGeneration != 3 || rc.Status.Phase != rotationv1alpha1.CredentialRotating || len(h.secretData()["token"]) == 0 {
		t.Fatalf("after the Secret was deleted: status %+v", rc.Status)
	}
	h.clock.SetTime(t0.Add(time.Hour + 11*time.Minute))
	if _, err := h.settle(); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Equal(m.revoked, []int64{1, 2}) {
		t.Fatalf("revoked %v, want [1 2] (every generation but the current one, 3)", m.revoked)
	}
}

// TestStaleCacheDoesNotRevokeAgain: status from the cache says generation
// 1 still waits for its revocation (phase Rotating at 2) while the stored
// object already records it revoked (Completed), and the Secret was just
// deleted: the stored object decides, so 1 is not revoked a second time
// (seen in e2e as a repeated "revoke 1" after a Secret deletion).
func TestStaleCacheDoesNotRevokeAgain(t *testing.T) {
	m := &revokeRecorder{}
	h := inGracePeriodOfGeneration1(t, m)
	stale := h.refresh().DeepCopy()
	if stale.Status.Phase != rotationv1alpha1.CredentialRotating || stale.Status.CredentialGeneration != 2 {
		t.Fatalf("not in the grace period of generation 1: %+v", stale.Status)
	}
	stale.ResourceVersion = "8"
	stored := stale.DeepCopy()
	stored.ResourceVersion = "9"
	stored.Status.Phase, stored.Status.GraceEndsTime = rotationv1alpha1.CredentialCompleted, nil
	if _, err := h.client.RotationV1alpha1().RotatingCredentials("team").UpdateStatus(context.Background(), stored, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.indexer.Update(stale); err != nil {
		t.Fatal(err)
	}
	if err := h.kube.CoreV1().Secrets("team").Delete(context.Background(), "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.sync(context.Background(), "team/db"); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.revoked) != 0 {
		t.Fatalf("revoked %v from a stale cache, want nothing until the cache shows the stored object", m.revoked)
	}
}
