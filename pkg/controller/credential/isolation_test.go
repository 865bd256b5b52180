package credential

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	"rekey.io/rekey/pkg/generated/informers/externalversions"
)

// hangingWebhook accepts every call and answers none until released (at
// the end of the test); it counts the calls it holds.
type hangingWebhook struct {
	*httptest.Server
	holding atomic.Int64
	// ended counts calls that ended before the release: a caller gave up
	// (its timeout) or the server closed.
	ended   atomic.Int64
	release chan struct{}
}

func newHangingWebhook(t *testing.T) *hangingWebhook {
	h := &hangingWebhook{release: make(chan struct{})}
	h.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.holding.Add(1)
		defer h.holding.Add(-1)
		select {
		case <-h.release:
		case <-r.Context().Done():
			h.ended.Add(1)
		}
	}))
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() { close(h.release) })
		h.Close()
	})
	return h
}

func webhookRC(name, url string, caPEM []byte) *rotationv1alpha1.RotatingCredential {
	rc := newRC()
	rc.Name, rc.UID, rc.Spec.SecretRef.Name = name, types.UID("uid-"+name), name
	timeout := int32(30)
	rc.Spec.Minter = rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterWebhook, Webhook: &rotationv1alpha1.WebhookMinter{URL: url, CABundle: caPEM, TimeoutSeconds: &timeout}}
	return rc
}

func certPEM(s *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

// TestHangingWebhooksHoldOnlyTheirOwnSlots: twenty RotatingCredentials
// whose webhook accepts calls and never answers do not delay a Random
// credential's mint, nor a revocation (/rotate Complete) on another
// webhook, nor a mint on another webhook: all of them finish while the
// hanging calls are still held. The controller runs with its real worker
// pool and queue, as in rekey-apiserver.
func TestHangingWebhooksHoldOnlyTheirOwnSlots(t *testing.T) {
	hanging := newHangingWebhook(t)
	var healthyCalls sync.Map // "op generation" -> true
	healthy := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req WebhookRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		healthyCalls.Store(fmt.Sprintf("%s %s %d", req.Name, req.Operation, req.Generation), true)
		if req.Operation == "mint" {
			_ = json.NewEncoder(w).Encode(WebhookResponse{Data: map[string][]byte{"password": []byte(fmt.Sprintf("p%d", req.Generation))}})
		}
	}))
	defer healthy.Close()

	var objects []runtime.Object
	for i := 0; i < 20; i++ {
		objects = append(objects, webhookRC(fmt.Sprintf("hook-%d", i), hanging.URL, certPEM(hanging.Server)))
	}
	random := newRC()
	random.Name, random.UID, random.Spec.SecretRef.Name = "random", "uid-random", "random"
	objects = append(objects, random, webhookRC("fresh", healthy.URL, certPEM(healthy)))
	// "leaked" is in a grace period, and /rotate Complete asked to revoke
	// the previous credential now.
	now := time.Now().Truncate(time.Second)
	leaked := recorded(webhookRC("leaked", healthy.URL, certPEM(healthy)), 2, now, rotationv1alpha1.CredentialRotating)
	leaked.Status.CompletionRequestedGeneration = 2
	leakedSecret := rotated(1, now)
	leakedSecret.Name = "leaked"
	objects = append(objects, leaked)

	client := fake.NewSimpleClientset(objects...)
	kube := kubefake.NewSimpleClientset(leakedSecret)
	var uids atomic.Int64
	kube.PrependReactor("create", "secrets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		s := a.(clienttesting.CreateAction).GetObject().(*corev1.Secret)
		s.UID = types.UID(fmt.Sprintf("uid-secret-%d", uids.Add(1)))
		return false, nil, nil
	})
	factory := externalversions.NewSharedInformerFactory(client, 0)
	c := NewController(client, kube, factory.Rotation().V1alpha1().RotatingCredentials(), factory.Rotation().V1alpha1().CertificateAuthorities(),
		factory.Certificates().V1alpha1().Signers(), clock.RealClock{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	start := time.Now()
	go c.Run(ctx, 16)

	minted := func(name string) bool {
		s, err := kube.CoreV1().Secrets("team").Get(ctx, name, metav1.GetOptions{})
		return err == nil && ReadSecret(s).Generation == 1 && len(s.Data) > 0
	}
	var randomAfter time.Duration
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 25*time.Second, true, func(context.Context) (bool, error) {
		if randomAfter == 0 && minted("random") {
			randomAfter = time.Since(start)
		}
		_, revoked := healthyCalls.Load("leaked revoke 1")
		return randomAfter > 0 && revoked && minted("fresh"), nil
	})
	held, ended := hanging.holding.Load(), hanging.ended.Load()
	t.Logf("with 20 hanging webhooks: Random minted after %v; all others done after %v; calls held by the hanging webhook then: %d, ended: %d", randomAfter, time.Since(start), held, ended)
	if err != nil {
		// For the record: how long the Random credential did wait.
		_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) { return minted("random"), nil })
		t.Logf("the Random credential minted %v after the start", time.Since(start))
		_, revoked := healthyCalls.Load("leaked revoke 1")
		t.Fatalf("while 20 webhooks hung: Random minted %v, the other webhook's mint %v, its revocation %v", randomAfter > 0, minted("fresh"), revoked)
	}
	if ended != 0 {
		t.Fatalf("%d calls to the hanging webhook had ended (timed out) before the others finished: they waited for it", ended)
	}
	// The hanging calls were made (on a loaded machine their TLS handshakes
	// can still be under way when the others finish) and are still held.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return hanging.holding.Load() > 0, nil
	}); err != nil {
		t.Fatal("the hanging webhook never received a call: the test did not exercise a hanging lane")
	}
}

// A full lane puts a key on its waiting list and hands it back when a call
// ends; another lane (another endpoint, or revocation) is not affected.
func TestLanes(t *testing.T) {
	var handedBack []string
	c := newCalls(func(k string) { handedBack = append(handedBack, k) })
	a := webhookRC("a", "https://hook-a.example:8443/mint", nil)
	lanes := laneOf(a, StepMint)
	if len(lanes) != 2 || lanes[0].limit != 4 || lanes[0].name != "Webhook Mint https://hook-a.example:8443" || lanes[1].limit != webhookCallLimit {
		t.Fatalf("lanes %+v", lanes)
	}
	for i := 0; i < 4; i++ {
		if !c.start(fmt.Sprintf("team/a%d", i), lanes...) {
			t.Fatalf("call %d found no slot", i)
		}
	}
	if c.start("team/a4", lanes...) {
		t.Fatal("a fifth call got a slot")
	}
	if c.start("team/a4", lanes...) {
		t.Fatal("a waiting key asking again got a slot")
	}
	if c.start("team/a0", lanes...) || !c.busy("team/a0") {
		t.Fatal("a key with a running call started another")
	}
	revoke := laneOf(a, StepRevoke)
	other := laneOf(webhookRC("b", "https://HOOK-B.example/x", nil), StepMint)
	if !c.start("team/r", revoke...) || !c.start("team/b", other...) {
		t.Fatal("a full lane held the revocation's or another endpoint's")
	}
	c.finish("team/a0")
	if len(handedBack) != 1 || handedBack[0] != "team/a4" || c.busy("team/a0") {
		t.Fatalf("handed back %v", handedBack)
	}
	if !c.start("team/a4", lanes...) {
		t.Fatal("the waiting key found no slot after one was freed")
	}
}

// startController runs the controller as rekey-apiserver does, over fake
// clients holding objects.
func startController(t *testing.T, ctx context.Context, objects []runtime.Object, secrets ...runtime.Object) (*Controller, *fake.Clientset, *kubefake.Clientset) {
	client := fake.NewSimpleClientset(objects...)
	kube := kubefake.NewSimpleClientset(secrets...)
	var uids atomic.Int64
	kube.PrependReactor("create", "secrets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		s := a.(clienttesting.CreateAction).GetObject().(*corev1.Secret)
		s.UID = types.UID(fmt.Sprintf("uid-secret-%d", uids.Add(1)))
		return false, nil, nil
	})
	// kube-apiserver refuses a write from a stale copy; the fake does not.
	var rv atomic.Int64
	gvr := rotationv1alpha1.SchemeGroupVersion.WithResource("rotatingcredentials")
	client.PrependReactor("update", "rotatingcredentials", func(a clienttesting.Action) (bool, runtime.Object, error) {
		rc := a.(clienttesting.UpdateAction).GetObject().(*rotationv1alpha1.RotatingCredential).DeepCopy()
		cur, err := client.Tracker().Get(gvr, rc.Namespace, rc.Name)
		if err != nil {
			return true, nil, err
		}
		if rc.ResourceVersion != cur.(*rotationv1alpha1.RotatingCredential).ResourceVersion {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), rc.Name, errors.New("stale"))
		}
		rc.ResourceVersion = strconv.FormatInt(rv.Add(1), 10)
		return true, rc, client.Tracker().Update(gvr, rc, rc.Namespace)
	})
	factory := externalversions.NewSharedInformerFactory(client, 0)
	c := NewController(client, kube, factory.Rotation().V1alpha1().RotatingCredentials(), factory.Rotation().V1alpha1().CertificateAuthorities(),
		factory.Certificates().V1alpha1().Signers(), clock.RealClock{})
	factory.Start(ctx.Done())
	go c.Run(ctx, 4)
	return c, client, kube
}

// A Secret deleted or edited by hand is minted again as soon as the watch
// reports it, not at the next rotation or resync (the RotatingCredential's
// own requeue is an hour away here).
func TestDeletedOrEditedSecretIsNoticedAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, client, kube := startController(t, ctx, []runtime.Object{newRC()})
	// waitFor waits until the Secret satisfies ok and status recorded it.
	waitFor := func(what string, ok func(*corev1.Secret) bool) *corev1.Secret {
		t.Helper()
		var s *corev1.Secret
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			s, err = kube.CoreV1().Secrets("team").Get(ctx, "db", metav1.GetOptions{})
			if err != nil || !ok(s) {
				return false, nil
			}
			rc, err := client.RotationV1alpha1().RotatingCredentials("team").Get(ctx, "db", metav1.GetOptions{})
			return err == nil && rc.Status.CredentialGeneration == ReadSecret(s).Generation && rc.Status.SecretUID == s.UID, nil
		}); err != nil {
			rc, _ := client.RotationV1alpha1().RotatingCredentials("team").Get(ctx, "db", metav1.GetOptions{})
			t.Fatalf("the Secret was never %s: %v; status %+v", what, s.Annotations, rc.Status)
		}
		return s
	}
	waitFor("minted", func(s *corev1.Secret) bool { return ReadSecret(s).Generation == 1 })
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.secrets.hasSynced("team"), nil
	}); err != nil {
		t.Fatal("the namespace's Secrets are not watched")
	}
	if err := kube.CoreV1().Secrets("team").Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s := waitFor("minted again after its deletion", func(s *corev1.Secret) bool { return ReadSecret(s).Generation == 2 })
	s.Data["token"] = []byte("typed in")
	if _, err := kube.CoreV1().Secrets("team").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("minted again after an edit", func(s *corev1.Secret) bool {
		return ReadSecret(s).Generation == 3 && string(s.Data["token"]) != "typed in"
	})
}
