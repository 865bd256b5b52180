package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/jwtkey"
	"rekey.io/rekey/test/framework"
)

// saClaims are claims as kube-apiserver sends them for a token of life
// seconds issued now.
func saClaims(issuer string, life time.Duration) string {
	now := time.Now().Unix()
	return base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(
		`{"aud":["https://kubernetes.default.svc"],"exp":%d,"iat":%d,"iss":%q,"jti":"j","kubernetes.io":{"namespace":"default","serviceaccount":{"name":"default","uid":"u"}},"nbf":%d,"sub":"system:serviceaccount:default:default"}`,
		now+int64(life/time.Second), now, issuer, now)))
}

// verifyJWS checks an answer of signjwt against the CA's current
// certificate as a verifier would: the header is alg ES256 with the kid
// the answer names, the signature of header.claims verifies with the
// certificate's key, and the kid is the key's (jwtkey.KeyID) and
// status.current.tokenKeyID. It returns the kid.
func verifyJWS(t *testing.T, ca *rotationv1alpha1.CertificateAuthority, claims string, got *rotationv1alpha1.JWTSignRequest) string {
	t.Helper()
	cert, err := authority.ParseCertificatePEM(ca.Status.Current.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		t.Fatalf("the CA key is a %T", cert.PublicKey)
	}
	kid, err := jwtkey.KeyID(pub)
	if err != nil {
		t.Fatal(err)
	}
	if got.KeyID != kid || got.Claims != "" {
		t.Fatalf("answer keyID %q claims %q: want the current key's kid %q and no claims", got.KeyID, got.Claims, kid)
	}
	if tk := ca.Status.Current.TokenKeyID; tk != kid {
		t.Fatalf("status.current.tokenKeyID %q is not the kid %q that signed", tk, kid)
	}
	hdrJSON, err := base64.RawURLEncoding.DecodeString(got.Header)
	if err != nil {
		t.Fatal(err)
	}
	var hdr map[string]string
	if err := json.Unmarshal(hdrJSON, &hdr); err != nil || hdr["alg"] != "ES256" || hdr["kid"] != kid || hdr["typ"] != "JWT" {
		t.Fatalf("header %s: %v", hdrJSON, err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(got.Signature)
	if err != nil || len(sig) != 64 {
		t.Fatalf("signature %q: %v", got.Signature, err)
	}
	digest := sha256.Sum256([]byte(got.Header + "." + claims))
	if !ecdsa.Verify(pub, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		t.Fatal("the JWS signature does not verify with status.current's key")
	}
	return kid
}

// signJWT posts claims to the CA's signjwt, retrying while the server's
// cache of CAs has not caught up with a change (503 naming the reason).
func signJWT(t *testing.T, client clientset.Interface, name, claims string) *rotationv1alpha1.JWTSignRequest {
	t.Helper()
	var got *rotationv1alpha1.JWTSignRequest
	framework.Eventually(t, 30*time.Second, "signjwt of "+name+" answers", func(ctx context.Context) error {
		var err error
		got, err = client.RotationV1alpha1().CertificateAuthorities().SignJWT(ctx, name, &rotationv1alpha1.JWTSignRequest{Claims: claims}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsServiceUnavailable(err) {
			return framework.Permanent(err)
		}
		return err
	})
	return got
}

// TestServiceAccountTokenSigning: certificateauthorities/NAME/signjwt
// against a real standalone server signs kube-apiserver's claims with the
// ServiceAccountTokens CA's current key (the JWS verifies with status.
// current's certificate, under its kid), refuses a Certificates CA, a
// lifetime over maxTokenExpiration, a wrong issuer, a dry run and a user
// without the permission, counts what it did in /metrics, and after a
// rotation (Start, then Prepared) signs with the new key under its kid.
// Standalone mode has no RBAC: its fixed policy gives the subresource to
// system:masters only, so the 403 here is of a user outside it; the
// rekey:jwt-signer ClusterRole is tested behind a real kube-apiserver by
// TestJWTSignerRole.
func TestServiceAccountTokenSigning(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	client := srv.Client
	ctx := context.Background()
	const issuer = "https://issuer.example"
	cas := client.RotationV1alpha1().CertificateAuthorities()
	if _, err := cas.Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: "sa-keys"},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{
			CommonName: "service-account keys", KeyAlgorithm: rotationv1alpha1.ECDSAP256, Rotation: framework.ImmediateRotation(),
			Purpose: rotationv1alpha1.PurposeServiceAccountTokens,
			ServiceAccountTokens: &rotationv1alpha1.ServiceAccountTokenKeys{
				MaxTokenExpiration: &metav1.Duration{Duration: time.Hour}, Issuer: issuer,
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cas.Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: "certs"},
		Spec:       rotationv1alpha1.CertificateAuthoritySpec{CommonName: "certificates", KeyAlgorithm: rotationv1alpha1.ECDSAP256},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := func(name string) *rotationv1alpha1.CertificateAuthority {
		return waitForCA(t, client, name, "Ready", func(ca *rotationv1alpha1.CertificateAuthority) bool {
			for _, c := range ca.Status.Conditions {
				if c.Type == rotationv1alpha1.CertificateAuthorityReady {
					return c.Status == metav1.ConditionTrue && ca.Status.Current != nil
				}
			}
			return false
		})
	}
	ready("certs")
	waitForCA(t, client, "sa-keys", "Ready with a tokenKeyID", func(ca *rotationv1alpha1.CertificateAuthority) bool {
		return ca.Status.Current != nil && ca.Status.Current.TokenKeyID != ""
	})
	ca := ready("sa-keys")

	claims := saClaims(issuer, time.Hour)
	oldKid := verifyJWS(t, ca, claims, signJWT(t, client, "sa-keys", claims))

	refused := []struct {
		name, ca, claims string
		dryRun           bool
		check            func(error) bool
		want             string
	}{
		{name: "Certificates CA", ca: "certs", claims: claims, check: apierrors.IsBadRequest,
			want: `CertificateAuthority "certs" signs certificates (spec.purpose Certificates), not service-account tokens`},
		{name: "lifetime over the max", ca: "sa-keys", claims: saClaims(issuer, time.Hour+time.Second), check: apierrors.IsInvalid,
			want: `claims: Invalid value: "exp" - "iat" is 3601 s, more than spec.serviceAccountTokens.maxTokenExpiration (1h0m0s)`},
		{name: "wrong issuer", ca: "sa-keys", claims: saClaims("https://evil.example", time.Minute), check: apierrors.IsInvalid,
			want: `"iss" must be spec.serviceAccountTokens.issuer "https://issuer.example"`},
		{name: "dry run", ca: "sa-keys", claims: claims, dryRun: true, check: apierrors.IsBadRequest, want: "does not support dryRun"},
		{name: "no such CA", ca: "nope", claims: claims, check: apierrors.IsNotFound, want: "not found"},
	}
	for _, tc := range refused {
		opts := metav1.CreateOptions{}
		if tc.dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err := cas.SignJWT(ctx, tc.ca, &rotationv1alpha1.JWTSignRequest{Claims: tc.claims}, opts)
		if !tc.check(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "system:serviceaccount") {
			t.Errorf("%s: the error echoes the claims: %v", tc.name, err)
		}
	}

	// A user outside system:masters (who may create requests) may not.
	user, _ := srv.ClientFor(t, "alice")
	if _, err := user.RotationV1alpha1().CertificateAuthorities().SignJWT(ctx, "sa-keys", &rotationv1alpha1.JWTSignRequest{Claims: claims}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("alice signed a token: %v", err)
	}

	waitForMetrics(t, client,
		fmt.Sprintf(`rekey_service_account_token_signatures_total{certificate_authority="sa-keys",key_id=%q,result="signed"} 1`, oldKid),
		`rekey_service_account_token_signatures_total{certificate_authority="sa-keys",key_id="",result="refused"} 2`,
		`rekey_service_account_token_signatures_total{certificate_authority="certs",key_id="",result="refused"} 1`,
		`rekey_service_account_token_sign_duration_seconds_count{certificate_authority="sa-keys"} 1`)

	// Rotate: while Preparing the old key signs; once Prepared the new one
	// does, under its own kid.
	if _, err := cas.Rotate(ctx, "sa-keys", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca = waitForCA(t, client, "sa-keys", "Prepared with the new key's tokenKeyID", func(ca *rotationv1alpha1.CertificateAuthority) bool {
		return ca.Status.Phase == rotationv1alpha1.PhasePrepared && ca.Status.Current != nil && ca.Status.Current.TokenKeyID != "" && ca.Status.Current.TokenKeyID != oldKid
	})
	// Every replica's cache of CAs follows the promotion: poll until it has.
	var signed *rotationv1alpha1.JWTSignRequest
	claims = saClaims(issuer, time.Minute)
	framework.Eventually(t, 30*time.Second, "signjwt signs with the new key", func(ctx context.Context) error {
		var err error
		if signed, err = cas.SignJWT(ctx, "sa-keys", &rotationv1alpha1.JWTSignRequest{Claims: claims}, metav1.CreateOptions{}); err != nil {
			return err
		}
		if signed.KeyID == oldKid {
			return fmt.Errorf("still signed by the old key %s", oldKid)
		}
		return nil
	})
	newKid := verifyJWS(t, ca, claims, signed)
	if ca.Status.Previous == nil {
		t.Fatal("Prepared with no previous key")
	}
	prev, err := authority.ParseCertificatePEM(ca.Status.Previous.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := jwtkey.KeyID(prev.PublicKey); k != oldKid || ca.Status.Previous.TokenKeyID != oldKid || newKid == oldKid {
		t.Fatalf("kids: before %s, previous %s (tokenKeyID %s), after %s", oldKid, k, ca.Status.Previous.TokenKeyID, newKid)
	}
}

// TestJWTSignerRole: behind a real kube-apiserver with RBAC, the
// rekey:jwt-signer ClusterRole artifacts/rbac ships (applied with the
// others) lets its user sign with the ServiceAccountTokens CA it names
// (service-account-tokens, the docs' name; no other test here may use it)
// and register the TrustConsumer it reports as; a user who may read CAs
// but lacks the role (rekey:trust-reporter) gets 403 from signjwt; and
// kube-apiserver queues the signer's signjwt (its certificate in group
// rekey:jwt-signers) in the shipped FlowSchema's priority level.
func TestJWTSignerRole(t *testing.T) {
	t.Parallel()
	cluster := kubeCluster(t)
	ctx := context.Background()
	// The cluster is shared: what this test makes carries "jwt-role", but
	// for the CA, whose name the shipped role names.
	const issuer = "https://jwt-role.example"
	const jwtRoleCA = "service-account-tokens"
	if _, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: jwtRoleCA},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{
			CommonName: "jwt-role keys", KeyAlgorithm: rotationv1alpha1.ECDSAP256,
			Purpose:              rotationv1alpha1.PurposeServiceAccountTokens,
			ServiceAccountTokens: &rotationv1alpha1.ServiceAccountTokenKeys{Issuer: issuer},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind := func(user, role string, groups ...string) clientset.Interface {
		if _, err := cluster.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "it-jwt-role-" + user},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("binding %s to %s: %v", user, role, err)
		}
		c, _, err := cluster.UserClient(user, groups...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// A signer's certificate carries O=rekey:jwt-signers, the group the
	// shipped FlowSchema classifies.
	signer := bind("jwt-role-signer", framework.JWTSignerRole, "rekey:jwt-signers")
	reader := bind("jwt-role-reader", "rekey:trust-reporter")
	ca := waitForCA(t, cluster.RekeyAdmin, jwtRoleCA, "Ready with a tokenKeyID", func(ca *rotationv1alpha1.CertificateAuthority) bool {
		return ca.Status.Current != nil && ca.Status.Current.TokenKeyID != ""
	})

	claims := saClaims(issuer, time.Hour)
	// RBAC reaches rekey's delegated authorizer within its cache's time.
	var signed *rotationv1alpha1.JWTSignRequest
	framework.Eventually(t, tcSettle+30*time.Second, "the rekey:jwt-signer user signs", func(ctx context.Context) error {
		var err error
		signed, err = signer.RotationV1alpha1().CertificateAuthorities().SignJWT(ctx, jwtRoleCA, &rotationv1alpha1.JWTSignRequest{Claims: claims}, metav1.CreateOptions{})
		return err
	})
	verifyJWS(t, ca, claims, signed)
	// kube-apiserver queued its signjwt in the priority level artifacts/rbac
	// ships for it, not in global-default.
	framework.Eventually(t, 30*time.Second, "signjwt dispatched by FlowSchema rekey-jwt-signer", func(ctx context.Context) error {
		if _, err := signer.RotationV1alpha1().CertificateAuthorities().SignJWT(ctx, jwtRoleCA, &rotationv1alpha1.JWTSignRequest{Claims: claims}, metav1.CreateOptions{}); err != nil {
			return err
		}
		body, err := cluster.Admin.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "apiserver_flowcontrol_dispatched_requests_total{") &&
				strings.Contains(line, `flow_schema="rekey-jwt-signer",priority_level="rekey-jwt-signer"`) {
				return nil
			}
		}
		return fmt.Errorf("kube-apiserver dispatched no request through FlowSchema rekey-jwt-signer")
	})
	// It may register the consumer it reports as, naming the CA (trust).
	framework.Eventually(t, tcSettle, "the rekey:jwt-signer user registers its trust consumer", func(ctx context.Context) error {
		_, err := signer.RotationV1alpha1().TrustConsumers().Create(ctx, &rotationv1alpha1.TrustConsumer{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-jwt.jwt-role"},
			Spec:       rotationv1alpha1.TrustConsumerSpec{CertificateAuthorities: []string{jwtRoleCA}},
		}, metav1.CreateOptions{})
		return err
	})
	// Reading CAs works for the reader (so its bindings have arrived)...
	framework.Eventually(t, tcSettle+30*time.Second, "the reader reads the CA", func(ctx context.Context) error {
		_, err := reader.RotationV1alpha1().CertificateAuthorities().Get(ctx, jwtRoleCA, metav1.GetOptions{})
		return err
	})
	// ... signing does not.
	_, err := reader.RotationV1alpha1().CertificateAuthorities().SignJWT(ctx, jwtRoleCA, &rotationv1alpha1.JWTSignRequest{Claims: claims}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "signjwt") {
		t.Fatalf("a user without rekey:jwt-signer signed: %v", err)
	}
	// The role names one CA: the signer may not sign with another (its
	// rights have arrived: it signed above), existing or not.
	_, err = signer.RotationV1alpha1().CertificateAuthorities().SignJWT(ctx, "jwt-role-other", &rotationv1alpha1.JWTSignRequest{Claims: claims}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("the rekey:jwt-signer user's signjwt of a CA the role does not name: %v, want 403", err)
	}
}
