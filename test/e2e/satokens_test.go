package e2e

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/jwtkey"
	"rekey.io/rekey/test/framework"
)

const (
	// saKeysCA is the ServiceAccountTokens CA the test's kube-apiservers
	// sign with: the one name the shipped rekey:jwt-signer role may sign
	// with.
	saKeysCA = "service-account-tokens"
	// saTokensNamespace and saTokensAccount are whose tokens are minted.
	saTokensNamespace = "e2e-satokens"
	saTokensAccount   = "e2e-sa"
	// saTokensNode is the kubelet whose pod gets a projected token.
	saTokensNode = "e2e-satokens-node"
	// tokenLifetime is every TokenRequest's expirationSeconds: the CA's
	// maxTokenExpiration (kube-apiserver's least, 10m), which the signer's
	// Metadata gives kube-apiserver as its cap.
	tokenLifetime = 10 * time.Minute
	// saRefreshHint is the signers' refresh_hint_seconds: how soon a
	// kube-apiserver fetches a changed key set by itself.
	saRefreshHint = 3 * time.Second
	// saTrustPropagation is the CA's spec.rotation.trustPropagation.
	saTrustPropagation = 5 * time.Second
)

// apiServer is one kube-apiserver of the test and its admin client.
type apiServer struct {
	name   string
	client kubernetes.Interface
}

// TestServiceAccountTokensSignedByRekey is issue #33's proof on the real
// cluster: kube-apiserver v1.37.1 signs service-account tokens through
// `rekey-agent jwt-signer` (--service-account-signing-endpoint) with a
// ServiceAccountTokens CertificateAuthority's key.
//
//  1. The CA, with the cluster's --service-account-key-file as a legacy
//     public key.
//  2. Migration: a token minted under the key file still reviews after
//     kube-apiserver is switched to the signer, and rekey-apiserver (whose
//     own token is such a token) keeps working.
//  3. TokenRequest signs with the CA's key (kid = status.current.tokenKeyID),
//     the token reviews and verifies against /openid/v1/jwks, a pod-bound
//     token reviews as the pod's.
//  4. A second kube-apiserver with a signer of its own on the same CA: each
//     accepts the other's tokens.
//  5. A rotation while both mint and review tokens without pause: no review
//     of an unexpired token fails, the new kid is in both JWKS before the
//     first token carrying it was asked for, Complete waits for the old
//     key's tokens unless forced, and after it a token of the old key is
//     refused by both.
//  6. The signer killed with SIGKILL: existing tokens keep reviewing,
//     TokenRequest fails while it is down (kube-apiserver waits for the
//     signer until the request's deadline) and works once it is back.
//  7. The legacy key's expireTime passes: the key file's token is refused.
//
// It switches the suite's kube-apiserver to the signer and back to the key
// files at its end (tokens it minted meanwhile then stop verifying; the
// others' were minted under the key files).
func TestServiceAccountTokensSignedByRekey(t *testing.T) {
	ctx := context.Background()
	began := time.Now()
	step := func(format string, args ...any) {
		t.Logf("[%5.1fs] %s", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}

	// A real kubelet (root only), up before the switch: its pod's
	// projected token is minted through the signer in step 4.
	var node *framework.Node
	if os.Getuid() == 0 {
		node = startKubelet(t, saTokensNode, nil, nil)
		step("kubelet %s Ready", saTokensNode)
	} else {
		t.Log("not root: no kubelet; the pod-bound token is checked through TokenRequest and TokenReview only")
	}

	// 1. The CA, with the key file's public key as a legacy key.
	saPub, err := os.ReadFile(filepath.Join(cluster.Dir, "pki", "sa.pub"))
	if err != nil {
		t.Fatal(err)
	}
	legacyPub, err := jwtkey.ParsePublicKeyPEM(string(saPub))
	if err != nil {
		t.Fatalf("the cluster's sa.pub: %v", err)
	}
	legacyKID, err := jwtkey.KeyID(legacyPub)
	if err != nil {
		t.Fatal(err)
	}
	cas := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities()
	if _, err := cas.Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: saKeysCA},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{
			CommonName:   "e2e service-account token key",
			KeyAlgorithm: rotationv1alpha1.ECDSAP256,
			KeyStore:     rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd},
			Purpose:      rotationv1alpha1.PurposeServiceAccountTokens,
			ServiceAccountTokens: &rotationv1alpha1.ServiceAccountTokenKeys{
				MaxTokenExpiration: &metav1.Duration{Duration: tokenLifetime},
				LegacyPublicKeys: []rotationv1alpha1.LegacyPublicKey{{
					PublicKey:  string(saPub),
					ExpireTime: metav1.NewTime(time.Now().Add(2 * time.Hour)),
				}},
			},
			Rotation: &rotationv1alpha1.RotationPolicy{
				TrustPropagation: &metav1.Duration{Duration: saTrustPropagation},
				RenewalWindow:    &metav1.Duration{},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating CertificateAuthority %s: %v", saKeysCA, err)
	}
	var consumers []string
	t.Cleanup(func() {
		// Last (cleanups run in reverse): after the kube-apiservers are
		// back on the key files and the signers are gone.
		for _, name := range consumers {
			if err := cluster.RekeyAdmin.RotationV1alpha1().TrustConsumers().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting TrustConsumer %s: %v", name, err)
			}
		}
		if err := cas.Delete(context.Background(), saKeysCA, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting CertificateAuthority %s: %v", saKeysCA, err)
		}
	})
	ca := waitTokenKeyReady(t, saKeysCA)
	oldKID := ca.Status.Current.TokenKeyID
	step("CA %s Ready, kid %s (legacy kid %s)", saKeysCA, oldKID, legacyKID)

	// The ServiceAccount (no kube-controller-manager here makes it).
	if _, err := cluster.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: saTokensNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := cluster.Admin.CoreV1().ServiceAccounts(saTokensNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: saTokensAccount}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	// 2. Migration: T0 under the key file, then kube-apiserver on the signer.
	a := apiServer{name: "kube-apiserver-a", client: cluster.Admin}
	t0, err := mintToken(ctx, a, nil)
	if err != nil {
		t.Fatalf("TokenRequest under the key file: %v", err)
	}
	if t0.kid != legacyKID {
		t.Fatalf("the key file's token has kid %q, want %q (jwtkey.KeyID of sa.pub)", t0.kid, legacyKID)
	}
	signerA := cluster.StartJWTSigner(t, framework.JWTSignerOptions{Name: "jwt-signer-a", TrustConsumer: "kube-apiserver-jwt.e2e-a", CertificateAuthority: saKeysCA, RefreshHint: saRefreshHint})
	consumers = append(consumers, signerA.TrustConsumer)
	step("jwt-signer A serving its cache on %s", signerA.Socket)
	t.Cleanup(func() {
		// Back on the key files for the tests that follow.
		if err := cluster.RestartKubeAPIServer(); err != nil {
			t.Errorf("restarting kube-apiserver on the key files: %v", err)
		}
	})
	if err := cluster.RestartKubeAPIServerWithSigningEndpoint(signerA.Socket); err != nil {
		t.Fatalf("restarting kube-apiserver on the signer: %v", err)
	}
	step("kube-apiserver A restarted with --service-account-signing-endpoint")
	if err := reviewToken(ctx, a, t0.token); err != nil {
		t.Fatalf("the token minted under the key file after the switch: %v", err)
	}

	// 3. TokenRequest through rekey. Its first answer may wait for the
	// aggregator to see rekey-apiserver again after the restart; rekey
	// answering signjwt at all means kube-apiserver authenticated
	// rekey-apiserver's own (key-file) token for the signer's
	// authorization.
	var t1 minted
	framework.Eventually(t, 60*time.Second, "TokenRequest on kube-apiserver A through rekey", func(ctx context.Context) error {
		var err error
		t1, err = mintToken(ctx, a, nil)
		return err
	})
	step("TokenRequest through rekey works")
	if t1.kid != oldKID {
		t.Fatalf("the token's kid is %q, want status.current.tokenKeyID %q", t1.kid, oldKID)
	}
	if err := reviewToken(ctx, a, t1.token); err != nil {
		t.Fatalf("TokenReview of rekey's token: %v", err)
	}
	jwks, err := fetchJWKS(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyWithJWKS(t1.token, jwks); err != nil {
		t.Fatalf("rekey's token against /openid/v1/jwks: %v", err)
	}
	if _, ok := jwks[legacyKID]; ok {
		t.Fatalf("/openid/v1/jwks serves the legacy key %s, which is excluded from discovery", legacyKID)
	}
	if err := reviewToken(ctx, a, t0.token); err != nil {
		t.Fatalf("the key file's token: %v", err)
	}
	pod := createTokenPod(t)
	bound, err := mintToken(ctx, a, &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
	if err != nil {
		t.Fatalf("pod-bound TokenRequest: %v", err)
	}
	review, err := tokenReview(ctx, a, bound.token)
	if err != nil {
		t.Fatal(err)
	}
	if !review.Status.Authenticated {
		t.Fatalf("the pod-bound token does not review: %q", review.Status.Error)
	}
	if got := review.Status.User.Extra["authentication.kubernetes.io/pod-name"]; !slices.Equal(got, authenticationv1.ExtraValue{pod.Name}) {
		t.Fatalf("the pod-bound token's user has pod-name %v, want %s (user %+v)", got, pod.Name, review.Status.User)
	}
	if claims := tokenClaims(t, bound.token); !strings.Contains(string(claims["kubernetes.io"]), `"`+pod.Name+`"`) {
		t.Fatalf("the pod-bound token's kubernetes.io claim does not name the pod: %s", claims["kubernetes.io"])
	}
	step("tokens review, verify against the JWKS; a pod-bound token reviews as pod %s", pod.Name)

	// 4. kube-apiserver B with a signer of its own. The signer's
	// kubeconfig points at A: B cannot start before its signer has
	// answered FetchKeys (a new control-plane host's signer reaches the
	// API through the others, as through a load balancer).
	signerB := cluster.StartJWTSigner(t, framework.JWTSignerOptions{Name: "jwt-signer-b", TrustConsumer: "kube-apiserver-jwt.e2e-b", CertificateAuthority: saKeysCA, RefreshHint: saRefreshHint})
	consumers = append(consumers, signerB.TrustConsumer)
	kasB, err := cluster.StartSecondKubeAPIServer("kube-apiserver-b", signerB.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-apiserver B log tail:\n%s", kasB.Process.LogTail(4000))
		}
		kasB.Stop()
	})
	b := apiServer{name: "kube-apiserver-b", client: kasB.Admin}
	step("kube-apiserver B on its own signer")
	var tb minted
	framework.Eventually(t, 60*time.Second, "TokenRequest on kube-apiserver B", func(ctx context.Context) error {
		var err error
		tb, err = mintToken(ctx, b, nil)
		return err
	})
	for _, c := range []struct {
		what   string
		token  string
		server apiServer
	}{{"A's token", t1.token, b}, {"B's token", tb.token, a}, {"B's token", tb.token, b}, {"the key file's token", t0.token, b}, {"the pod-bound token", bound.token, b}} {
		if err := reviewToken(ctx, c.server, c.token); err != nil {
			t.Fatalf("%s on %s: %v", c.what, c.server.name, err)
		}
	}
	step("each kube-apiserver accepts the other's tokens")
	initial := []minted{t0, t1, tb, bound}
	if node != nil {
		podToken := kubeletPodToken(t, node, a, b)
		if podToken.kid != oldKID {
			t.Fatalf("the kubelet's pod token has kid %s, want %s", podToken.kid, oldKID)
		}
		initial = append(initial, podToken)
		step("the kubelet's pod's projected token reviews on both")
	}

	// 5. A rotation under load.
	load := startTokenLoad(t, []apiServer{a, b}, initial)
	if _, err := cas.Rotate(ctx, saKeysCA, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		load.stop()
		t.Fatalf("Start: %v", err)
	}
	step("rotation started")
	prepared := waitPreparedUnderLoad(t, load, saKeysCA)
	newKID := prepared.Status.Current.TokenKeyID
	preparedAt := prepared.Status.LastInitiationFinishedTime.Time
	step("Prepared: new kid %s", newKID)
	if newKID == "" || newKID == oldKID || prepared.Status.Previous == nil || prepared.Status.Previous.TokenKeyID != oldKID {
		load.stop()
		t.Fatalf("after Prepared current kid %q, previous %+v; the old kid was %s", newKID, prepared.Status.Previous, oldKID)
	}
	// The gate waited for both signers: each reported, as its consumer,
	// that its kube-apiserver had fetched the new key before Prepared.
	if n := prepared.Status.Trust; n == nil || n.Consumers != 2 || n.Waiting != 0 {
		load.stop()
		t.Fatalf("Prepared with status.trust %+v, want 2 consumers, none waiting", n)
	}
	for _, name := range consumers {
		if err := reportedHolding(ctx, name, prepared.Status.Current.Fingerprint, preparedAt); err != nil {
			load.stop()
			t.Fatal(err)
		}
	}
	// Both servers hand out the new kid, and the load goes on a while.
	framework.Eventually(t, 30*time.Second, "tokens of the new key from both kube-apiservers", func(context.Context) error {
		if err := load.err(); err != nil {
			return framework.Permanent(err)
		}
		for _, s := range []apiServer{a, b} {
			if !load.minted(s.name, newKID) {
				return fmt.Errorf("no token of kid %s from %s yet", newKID, s.name)
			}
		}
		return nil
	})
	load.keepGoing(3 * time.Second)
	load.stop()
	step("load stopped: %s", load.summary())
	load.check(t, oldKID, newKID, legacyKID, preparedAt)
	firstNew := load.first(newKID)
	if jwks, err := fetchJWKS(ctx, a); err != nil {
		t.Fatal(err)
	} else if err := verifyWithJWKS(firstNew.token, jwks); err != nil {
		t.Fatalf("the first token of the new key against A's /openid/v1/jwks: %v", err)
	}

	// Complete waits for the old key's tokens.
	_, err = cas.Rotate(ctx, saKeysCA, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete}, metav1.CreateOptions{})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "tokens signed by the previous key") || !strings.Contains(err.Error(), oldKID) {
		t.Fatalf("Complete without force with the old key's tokens unexpired: want a 409 naming the previous key's tokens and kid %s, got %v", oldKID, err)
	}
	if ca, err := cas.Get(ctx, saKeysCA, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if p := ca.Status.Previous; ca.Status.Phase != rotationv1alpha1.PhasePrepared || p == nil || p.TokensExpireTime == nil ||
		p.TokensExpireTime.Time.Before(preparedAt.Add(tokenLifetime)) {
		t.Fatalf("after the refused Complete: phase %s, previous %+v (want tokensExpireTime at least Prepared %s + %s)", ca.Status.Phase, p, preparedAt, tokenLifetime)
	}
	step("Complete without force refused: %v", err)
	if _, err := cas.Rotate(ctx, saKeysCA, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete, Force: true}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("Complete with force: %v", err)
	}
	waitCAPhase(t, saKeysCA, rotationv1alpha1.PhaseCompleted)
	completed := time.Now()
	step("Completed (forced)")
	// The old key's tokens stop reviewing within the refresh hint (and
	// kube-apiserver's 10s cache of successful authentications).
	oldOnB := load.firstFrom(b.name, oldKID)
	framework.Eventually(t, 45*time.Second, "the old key's tokens refused by both kube-apiservers", func(ctx context.Context) error {
		for _, s := range []apiServer{a, b} {
			for _, tok := range []minted{t1, oldOnB} {
				r, err := tokenReview(ctx, s, tok.token)
				if err != nil {
					return err
				}
				if r.Status.Authenticated {
					return fmt.Errorf("%s still accepts a token of the old kid %s from %s", s.name, oldKID, tok.server)
				}
			}
			if jwks, err := fetchJWKS(ctx, s); err != nil {
				return err
			} else if _, ok := jwks[oldKID]; ok {
				return fmt.Errorf("%s's /openid/v1/jwks still serves the old kid", s.name)
			}
		}
		return nil
	})
	step("the old key's tokens refused by both %.1fs after Completed", time.Since(completed).Seconds())
	for _, s := range []apiServer{a, b} {
		tok, err := mintToken(ctx, s, nil)
		if err != nil {
			t.Fatalf("TokenRequest on %s after Complete: %v", s.name, err)
		}
		if tok.kid != newKID {
			t.Fatalf("a token of %s after Complete has kid %s, want %s", s.name, tok.kid, newKID)
		}
		for _, r := range []apiServer{a, b} {
			for what, tt := range map[string]minted{"a new token": tok, "the first token of the new key": firstNew, "the key file's token": t0} {
				if err := reviewToken(ctx, r, tt.token); err != nil {
					t.Fatalf("%s (from %s) on %s after Complete: %v", what, tt.server, r.name, err)
				}
			}
		}
	}

	// 6. The signer killed: kube-apiserver keeps verifying with the keys
	// it holds, and cannot sign until the signer is back. kube-apiserver
	// dials the signer with WaitForReady, so a TokenRequest meanwhile
	// waits for it until the request's deadline (5s here) rather than
	// failing at once.
	live, err := mintToken(ctx, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	signerA.Kill()
	step("jwt-signer A killed")
	down, cancel := context.WithTimeout(ctx, 5*time.Second)
	if tok, err := mintToken(down, a, nil); err == nil {
		cancel()
		t.Fatalf("TokenRequest on A succeeded with its signer killed (kid %s)", tok.kid)
	} else {
		step("TokenRequest on A with its signer down fails: %v", err)
	}
	cancel()
	framework.Stays(t, 2*saRefreshHint, "existing tokens reviewing on A with its signer down", func(ctx context.Context) error {
		for what, tok := range map[string]minted{"a token of the current key": live, "the first token of the new key": firstNew, "the key file's token": t0} {
			if err := reviewToken(ctx, a, tok.token); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		}
		return nil
	})
	step("existing tokens kept reviewing on A with its signer down")
	signerA.Restart(t)
	restarted := time.Now()
	framework.Eventually(t, 60*time.Second, "TokenRequest on A once its signer is back", func(ctx context.Context) error {
		tok, err := mintToken(ctx, a, nil)
		if err != nil {
			return err
		}
		return reviewToken(ctx, b, tok.token)
	})
	step("TokenRequest on A works again %.1fs after the signer's restart", time.Since(restarted).Seconds())

	// 7. Migration's end: once the legacy key's expireTime passes, the
	// signers stop serving it and the key file's token is refused; the
	// CA's own tokens still review. Last, because rekey-apiserver's own
	// credential here is such a token (docs/decisions.md: a token minted
	// before the switch serves only as long as it lives): from now on
	// rekey cannot authorize signjwt until the cleanup puts
	// kube-apiserver back on the key files.
	current, err := mintToken(ctx, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	expire := time.Now().Add(4 * time.Second).Truncate(time.Second)
	patch := fmt.Sprintf(`{"spec":{"serviceAccountTokens":{"legacyPublicKeys":[{"publicKey":%q,"expireTime":%q}]}}}`, saPub, expire.UTC().Format(time.RFC3339))
	if _, err := cas.Patch(ctx, saKeysCA, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("moving the legacy key's expireTime to %s: %v", expire, err)
	}
	framework.Stays(t, time.Until(expire)-time.Second, "the key file's token reviewing until the legacy key's expireTime", func(ctx context.Context) error {
		for _, s := range []apiServer{a, b} {
			if err := reviewToken(ctx, s, t0.token); err != nil {
				return err
			}
		}
		return nil
	})
	framework.Eventually(t, 45*time.Second, "the key file's token refused by both kube-apiservers after the legacy key's expireTime", func(ctx context.Context) error {
		for _, s := range []apiServer{a, b} {
			r, err := tokenReview(ctx, s, t0.token)
			if err != nil {
				return err
			}
			if r.Status.Authenticated {
				return fmt.Errorf("%s still accepts the key file's token", s.name)
			}
		}
		return nil
	})
	step("the key file's token refused by both %.1fs after the legacy key's expireTime", time.Since(expire).Seconds())
	for _, s := range []apiServer{a, b} {
		if err := reviewToken(ctx, s, current.token); err != nil {
			t.Fatalf("a token of the CA's key on %s after the legacy key expired: %v", s.name, err)
		}
	}
}

// reportedHolding checks that the TrustConsumer reported holding the CA
// key of fingerprint no later than by (the server's times, whole seconds).
func reportedHolding(ctx context.Context, consumer, fingerprint string, by time.Time) error {
	tc, err := cluster.RekeyAdmin.RotationV1alpha1().TrustConsumers().Get(ctx, consumer, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("TrustConsumer %s: %w", consumer, err)
	}
	for _, h := range tc.Status.Holds {
		if h.CertificateAuthority != saKeysCA {
			continue
		}
		if !slices.Contains(h.Fingerprints, fingerprint) || h.ReportTime == nil || h.ReportTime.After(by) {
			return fmt.Errorf("TrustConsumer %s reports %+v; want the new key %s reported by Prepared (%s)", consumer, h, fingerprint, by)
		}
		return nil
	}
	return fmt.Errorf("TrustConsumer %s reports nothing on %s: %+v", consumer, saKeysCA, tc.Status)
}

// kubeletPodToken runs a pod on the kubelet with a projected
// service-account token (no image is needed: the kubelet mounts a pod's
// volumes before it creates its sandbox), reads the token the kubelet
// wrote, and checks that both kube-apiservers authenticate it as the pod's.
func kubeletPodToken(t *testing.T, node *framework.Node, servers ...apiServer) minted {
	t.Helper()
	ctx := context.Background()
	const volume = "sa-token"
	pod, err := cluster.Admin.CoreV1().Pods(saTokensNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-kubelet-token-pod"},
		Spec: corev1.PodSpec{
			NodeName:                     node.Name,
			ServiceAccountName:           saTokensAccount,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.k8s.io/pause:3.10",
				VolumeMounts: []corev1.VolumeMount{{Name: volume, MountPath: "/var/run/secrets/tokens"}},
			}},
			Volumes: []corev1.Volume{{Name: volume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(int64(tokenLifetime.Seconds()))}}},
			}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the kubelet's pod: %v", err)
	}
	t.Cleanup(func() {
		_ = cluster.Admin.CoreV1().Pods(saTokensNamespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	})
	path := filepath.Join(node.Dir, "kubelet", "pods", string(pod.UID), "volumes", "kubernetes.io~projected", volume, "token")
	var tok minted
	framework.Eventually(t, 60*time.Second, "the kubelet writing the pod's projected token", func(context.Context) error {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		hdr, err := tokenHeader(string(data))
		if err != nil {
			return err
		}
		tok = minted{token: string(data), kid: hdr.KeyID, server: "kubelet " + node.Name}
		return nil
	})
	var exp int64
	if err := json.Unmarshal(tokenClaims(t, tok.token)["exp"], &exp); err != nil {
		t.Fatalf("the kubelet's pod token's exp: %v", err)
	}
	tok.exp = time.Unix(exp, 0)
	for _, s := range servers {
		r, err := tokenReview(ctx, s, tok.token)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Status.Authenticated || !slices.Equal(r.Status.User.Extra["authentication.kubernetes.io/pod-name"], authenticationv1.ExtraValue{pod.Name}) {
			t.Fatalf("the kubelet's pod token on %s: authenticated %t (%q) as %+v", s.name, r.Status.Authenticated, r.Status.Error, r.Status.User)
		}
	}
	return tok
}

// waitTokenKeyReady waits for a ServiceAccountTokens CA to be Ready with
// the kid of its current key in status.
func waitTokenKeyReady(t *testing.T, name string) *rotationv1alpha1.CertificateAuthority {
	t.Helper()
	var ca *rotationv1alpha1.CertificateAuthority
	framework.Eventually(t, 60*time.Second, "CA "+name+" Ready with a tokenKeyID", func(ctx context.Context) error {
		var err error
		if ca, err = cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if !apimeta.IsStatusConditionTrue(ca.Status.Conditions, rotationv1alpha1.CertificateAuthorityReady) || ca.Status.Current == nil || ca.Status.Current.TokenKeyID == "" {
			return fmt.Errorf("current %+v, conditions %+v", ca.Status.Current, ca.Status.Conditions)
		}
		return nil
	})
	return ca
}

// createTokenPod creates a Pod of the test's ServiceAccount for a bound
// token (no kubelet runs it; kube-apiserver checks it exists).
func createTokenPod(t *testing.T) *corev1.Pod {
	t.Helper()
	pod, err := cluster.Admin.CoreV1().Pods(saTokensNamespace).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-token-pod"},
		Spec: corev1.PodSpec{
			ServiceAccountName: saTokensAccount,
			Containers:         []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the token's pod: %v", err)
	}
	return pod
}

// minted is a token and how it was asked for.
type minted struct {
	token, kid string
	// server is the kube-apiserver that minted it.
	server string
	// start is when its TokenRequest was sent.
	start time.Time
	exp   time.Time
}

// mintToken asks server for a token of the test's ServiceAccount, bound
// to an object when bound is set.
func mintToken(ctx context.Context, server apiServer, bound *authenticationv1.BoundObjectReference) (minted, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	req, err := server.client.CoreV1().ServiceAccounts(saTokensNamespace).CreateToken(ctx, saTokensAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(tokenLifetime.Seconds())), BoundObjectRef: bound},
	}, metav1.CreateOptions{})
	if err != nil {
		return minted{}, fmt.Errorf("TokenRequest on %s: %w", server.name, err)
	}
	hdr, err := tokenHeader(req.Status.Token)
	if err != nil {
		return minted{}, fmt.Errorf("token from %s: %w", server.name, err)
	}
	return minted{token: req.Status.Token, kid: hdr.KeyID, server: server.name, start: start, exp: req.Status.ExpirationTimestamp.Time}, nil
}

// tokenReview posts a TokenReview to server.
func tokenReview(ctx context.Context, server apiServer, token string) (*authenticationv1.TokenReview, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := server.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("TokenReview on %s: %w", server.name, err)
	}
	return r, nil
}

// reviewToken is nil when server authenticates token as the test's
// ServiceAccount.
func reviewToken(ctx context.Context, server apiServer, token string) error {
	r, err := tokenReview(ctx, server, token)
	if err != nil {
		return err
	}
	want := "system:serviceaccount:" + saTokensNamespace + ":" + saTokensAccount
	switch {
	case !r.Status.Authenticated:
		return fmt.Errorf("%s refuses the token: %q", server.name, r.Status.Error)
	case r.Status.User.Username != want:
		return fmt.Errorf("%s authenticates the token as %q, want %q", server.name, r.Status.User.Username, want)
	}
	return nil
}

// jwsHeader is a token's protected header.
type jwsHeader struct {
	Algorithm string `json:"alg"`
	KeyID     string `json:"kid"`
	Type      string `json:"typ"`
}

func tokenHeader(token string) (jwsHeader, error) {
	var h jwsHeader
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return h, fmt.Errorf("a JWS has 3 parts, this one %d", len(parts))
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return h, fmt.Errorf("header: %w", err)
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return h, fmt.Errorf("header: %w", err)
	}
	return h, nil
}

func tokenClaims(t *testing.T, token string) map[string]json.RawMessage {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("a JWS has 3 parts, this one %d", len(parts))
	}
	claims, err := jwtkey.DecodeClaims(parts[1])
	if err != nil {
		t.Fatalf("the token's claims: %v", err)
	}
	return claims
}

// jwk is one key of /openid/v1/jwks.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
	N   string `json:"n"`
	E   string `json:"e"`
}

// fetchJWKS reads server's /openid/v1/jwks, by kid.
func fetchJWKS(ctx context.Context, server apiServer) (map[string]jwk, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	body, err := server.client.CoreV1().RESTClient().Get().AbsPath("/openid/v1/jwks").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET /openid/v1/jwks on %s: %w", server.name, err)
	}
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("/openid/v1/jwks of %s: %w", server.name, err)
	}
	keys := map[string]jwk{}
	for _, k := range set.Keys {
		keys[k.Kid] = k
	}
	return keys, nil
}

// verifyWithJWKS checks the token's signature with the JWKS key its kid
// names, as a verifier outside the cluster does.
func verifyWithJWKS(token string, keys map[string]jwk) error {
	hdr, err := tokenHeader(token)
	if err != nil {
		return err
	}
	k, ok := keys[hdr.KeyID]
	if !ok {
		return fmt.Errorf("no key %s in the JWKS", hdr.KeyID)
	}
	b64 := func(s string) *big.Int {
		raw, _ := base64.RawURLEncoding.DecodeString(s)
		return new(big.Int).SetBytes(raw)
	}
	i := strings.LastIndex(token, ".")
	digest := sha256.Sum256([]byte(token[:i]))
	sig, err := base64.RawURLEncoding.DecodeString(token[i+1:])
	if err != nil {
		return fmt.Errorf("signature: %w", err)
	}
	switch {
	case hdr.Algorithm == "ES256" && k.Kty == "EC" && k.Crv == "P-256":
		x, errX := base64.RawURLEncoding.DecodeString(k.X)
		y, errY := base64.RawURLEncoding.DecodeString(k.Y)
		if errX != nil || errY != nil || len(x) != 32 || len(y) != 32 {
			return fmt.Errorf("JWKS key %s: x and y are not 32-byte base64url", hdr.KeyID)
		}
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return fmt.Errorf("JWKS key %s: %w", hdr.KeyID, err)
		}
		if len(sig) != 64 || !ecdsa.Verify(pub, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
			return fmt.Errorf("the ES256 signature does not verify with JWKS key %s", hdr.KeyID)
		}
	case hdr.Algorithm == "RS256" && k.Kty == "RSA":
		pub := &rsa.PublicKey{N: b64(k.N), E: int(b64(k.E).Int64())}
		if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig); err != nil {
			return fmt.Errorf("the RS256 signature does not verify with JWKS key %s: %w", hdr.KeyID, err)
		}
	default:
		return fmt.Errorf("alg %s with a JWKS key of kty %s crv %s", hdr.Algorithm, k.Kty, k.Crv)
	}
	return nil
}

// tokenLoad mints tokens on every server and reviews every unexpired token
// minted so far on every server, without pause, and watches each server's
// JWKS every 50ms, recording when each kid first appears there.
type tokenLoad struct {
	servers []apiServer
	done    chan struct{}
	wg      sync.WaitGroup

	mu             sync.Mutex
	tokens         []minted
	reviews        int
	failedReviews  []string
	failedRequests []string
	jwksErrors     []string
	// firstSeen is, by server and kid, when a JWKS answer holding the kid
	// had arrived (the end of the request: later than the key appeared).
	firstSeen map[string]map[string]time.Time
}

func startTokenLoad(t *testing.T, servers []apiServer, initial []minted) *tokenLoad {
	l := &tokenLoad{servers: servers, done: make(chan struct{}), tokens: slices.Clone(initial), firstSeen: map[string]map[string]time.Time{}}
	t.Cleanup(l.stop)
	for _, s := range servers {
		l.firstSeen[s.name] = map[string]time.Time{}
		l.wg.Add(3)
		go l.mint(s)
		go l.review(s)
		go l.watchJWKS(s)
	}
	return l
}

func (l *tokenLoad) stopped() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// stop ends the load and waits for it (idempotent).
func (l *tokenLoad) stop() {
	l.mu.Lock()
	if !l.stopped() {
		close(l.done)
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// keepGoing lets the load run for d more.
func (l *tokenLoad) keepGoing(d time.Duration) {
	select {
	case <-l.done:
	case <-time.After(d):
	}
}

func (l *tokenLoad) mint(s apiServer) {
	defer l.wg.Done()
	tick := time.NewTicker(150 * time.Millisecond)
	defer tick.Stop()
	for !l.stopped() {
		tok, err := mintToken(context.Background(), s, nil)
		l.mu.Lock()
		if err != nil {
			l.failedRequests = append(l.failedRequests, fmt.Sprintf("%s: %v", time.Now().Format(time.StampMilli), err))
		} else {
			l.tokens = append(l.tokens, tok)
		}
		l.mu.Unlock()
		select {
		case <-l.done:
		case <-tick.C:
		}
	}
}

func (l *tokenLoad) review(s apiServer) {
	defer l.wg.Done()
	for !l.stopped() {
		l.mu.Lock()
		tokens := slices.Clone(l.tokens)
		l.mu.Unlock()
		for _, tok := range tokens {
			if l.stopped() {
				return
			}
			if time.Until(tok.exp) < time.Second {
				continue
			}
			err := reviewToken(context.Background(), s, tok.token)
			l.mu.Lock()
			l.reviews++
			if err != nil {
				l.failedReviews = append(l.failedReviews, fmt.Sprintf("%s: kid %s from %s: %v", time.Now().Format(time.StampMilli), tok.kid, tok.server, err))
			}
			l.mu.Unlock()
		}
	}
}

func (l *tokenLoad) watchJWKS(s apiServer) {
	defer l.wg.Done()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !l.stopped() {
		keys, err := fetchJWKS(context.Background(), s)
		now := time.Now()
		l.mu.Lock()
		if err != nil {
			l.jwksErrors = append(l.jwksErrors, err.Error())
		}
		for kid := range keys {
			if _, ok := l.firstSeen[s.name][kid]; !ok {
				l.firstSeen[s.name][kid] = now
			}
		}
		l.mu.Unlock()
		select {
		case <-l.done:
		case <-tick.C:
		}
	}
}

// err is the load's first failure so far (nil: none).
func (l *tokenLoad) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case len(l.failedReviews) > 0:
		return fmt.Errorf("%d failed TokenReviews, first: %s", len(l.failedReviews), l.failedReviews[0])
	case len(l.failedRequests) > 0:
		return fmt.Errorf("%d failed TokenRequests, first: %s", len(l.failedRequests), l.failedRequests[0])
	}
	return nil
}

// minted reports whether server has minted a token of kid.
func (l *tokenLoad) minted(server, kid string) bool {
	return l.firstFrom(server, kid).token != ""
}

// first is the token of kid whose TokenRequest started first.
func (l *tokenLoad) first(kid string) minted {
	return l.firstFrom("", kid)
}

// firstFrom is first among server's tokens (any server's when empty).
func (l *tokenLoad) firstFrom(server, kid string) minted {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first minted
	for _, tok := range l.tokens {
		if tok.kid == kid && (server == "" || tok.server == server) && (first.token == "" || tok.start.Before(first.start)) {
			first = tok
		}
	}
	return first
}

func (l *tokenLoad) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	kids := map[string]int{}
	for _, tok := range l.tokens {
		kids[tok.kid]++
	}
	return fmt.Sprintf("%d tokens by kid %v, %d TokenReviews, %d failed, %d failed TokenRequests, %d failed JWKS reads",
		len(l.tokens), kids, l.reviews, len(l.failedReviews), len(l.failedRequests), len(l.jwksErrors))
}

// check asserts what the rotation must keep: no review of an unexpired
// token failed, no TokenRequest failed, every token carries the old or the
// new kid (the key file's only before the switch), the new kid was in every
// server's JWKS before the first TokenRequest whose token carried it
// started, the legacy kid never was, and tokens asked for well after
// Prepared carry the new kid.
func (l *tokenLoad) check(t *testing.T, oldKID, newKID, legacyKID string, prepared time.Time) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reviews < 100 {
		t.Errorf("only %d TokenReviews under load", l.reviews)
	}
	if n := len(l.failedReviews); n > 0 {
		t.Errorf("%d TokenReviews of unexpired tokens failed; the first ones:\n%s", n, strings.Join(l.failedReviews[:min(n, 10)], "\n"))
	}
	if n := len(l.failedRequests); n > 0 {
		t.Errorf("%d TokenRequests failed during the rotation; the first ones:\n%s", n, strings.Join(l.failedRequests[:min(n, 10)], "\n"))
	}
	var first minted
	for i, tok := range l.tokens {
		switch {
		case tok.kid == newKID:
			if first.token == "" || tok.start.Before(first.start) {
				first = tok
			}
		case tok.kid == oldKID:
			// A short switch: rekey-apiserver's key cache follows the
			// CA's status within moments of Prepared.
			if tok.start.After(prepared.Add(5 * time.Second)) {
				t.Errorf("a token asked for %s after Prepared (from %s) carries the old kid", tok.start.Sub(prepared), tok.server)
			}
		case tok.kid == legacyKID && i == 0:
			// T0, minted under the key file (startTokenLoad's first).
		default:
			t.Errorf("a token from %s carries kid %q, neither the old (%s) nor the new (%s)", tok.server, tok.kid, oldKID, newKID)
		}
	}
	if first.token == "" {
		t.Fatalf("no token carries the new kid %s", newKID)
	}
	for _, s := range l.servers {
		seen, ok := l.firstSeen[s.name][newKID]
		switch {
		case !ok:
			t.Errorf("%s's /openid/v1/jwks never served the new kid", s.name)
		case !seen.Before(first.start):
			t.Errorf("the first token of the new kid (from %s) was asked for at %s, before %s's JWKS was seen holding it (%s)",
				first.server, first.start.Format(time.StampMilli), s.name, seen.Format(time.StampMilli))
		default:
			t.Logf("the new kid was in %s's JWKS %s before the first TokenRequest that got it", s.name, first.start.Sub(seen).Round(time.Millisecond))
		}
		if _, ok := l.firstSeen[s.name][legacyKID]; ok {
			t.Errorf("%s's /openid/v1/jwks served the legacy key, which is excluded from discovery", s.name)
		}
	}
}

// waitPreparedUnderLoad waits for the CA to reach Prepared, ending early
// when the load fails.
func waitPreparedUnderLoad(t *testing.T, load *tokenLoad, name string) *rotationv1alpha1.CertificateAuthority {
	t.Helper()
	var ca *rotationv1alpha1.CertificateAuthority
	framework.Eventually(t, 90*time.Second, "CA "+name+" Prepared (both signers' kube-apiservers fetched the new key)", func(ctx context.Context) error {
		if err := load.err(); err != nil {
			return framework.Permanent(err)
		}
		var err error
		if ca, err = cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if ca.Status.Phase != rotationv1alpha1.PhasePrepared {
			return fmt.Errorf("phase %q, trust %+v", ca.Status.Phase, ca.Status.Trust)
		}
		return nil
	})
	return ca
}
