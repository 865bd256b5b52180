package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/test/framework"
)

// legacyKeyPEM is a fresh public key, as a key-file migration puts in
// spec.serviceAccountTokens.legacyPublicKeys.
func legacyKeyPEM(t *testing.T) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// TestLegacyTokenKeysNeedSignJWT: behind a real kube-apiserver with RBAC,
// a user who may get and update CertificateAuthorities but not create
// certificateauthorities/signjwt gets 403 naming the permission when
// adding a legacyPublicKeys entry (kube-apiserver would accept every token
// that key signs), and may remove one.
func TestLegacyTokenKeysNeedSignJWT(t *testing.T) {
	t.Parallel()
	cluster := kubeCluster(t)
	ctx := context.Background()
	// The cluster is shared: what this test makes carries "legacy-keys".
	const name, user = "it-legacy-keys", "it-legacy-keys-editor"
	expire := metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))
	keep, drop, planted := legacyKeyPEM(t), legacyKeyPEM(t), legacyKeyPEM(t)
	if _, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{
			CommonName: "legacy-keys", KeyAlgorithm: rotationv1alpha1.ECDSAP256,
			Purpose: rotationv1alpha1.PurposeServiceAccountTokens,
			ServiceAccountTokens: &rotationv1alpha1.ServiceAccountTokenKeys{LegacyPublicKeys: []rotationv1alpha1.LegacyPublicKey{
				{PublicKey: keep, ExpireTime: expire}, {PublicKey: drop, ExpireTime: expire},
			}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "it-legacy-keys-editor"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"rotation.rekey.io"}, Resources: []string{"certificateauthorities"}, Verbs: []string{"get", "update"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "it-legacy-keys-editor"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "it-legacy-keys-editor"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	editor, _, err := cluster.UserClient(user)
	if err != nil {
		t.Fatal(err)
	}
	cas := editor.RotationV1alpha1().CertificateAuthorities()
	// edit updates the CA as the editor, retrying on a conflict with the
	// controller's status writes.
	edit := func(ctx context.Context, change func([]rotationv1alpha1.LegacyPublicKey) []rotationv1alpha1.LegacyPublicKey) error {
		ca, err := cas.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ca.Spec.ServiceAccountTokens.LegacyPublicKeys = change(ca.Spec.ServiceAccountTokens.LegacyPublicKeys)
		_, err = cas.Update(ctx, ca, metav1.UpdateOptions{})
		return err
	}
	const because = "kube-apiserver accepts every service-account token a legacy public key signs"
	// RBAC reaches rekey's delegated authorizer within its cache's time:
	// until then update itself is refused, by RBAC, with another message.
	framework.Eventually(t, tcSettle+30*time.Second, "adding a key refused by admission", func(ctx context.Context) error {
		err := edit(ctx, func(k []rotationv1alpha1.LegacyPublicKey) []rotationv1alpha1.LegacyPublicKey {
			return append(k, rotationv1alpha1.LegacyPublicKey{PublicKey: planted, ExpireTime: metav1.NewTime(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC))})
		})
		switch {
		case err == nil:
			return framework.Permanent(fmt.Errorf("user %s without signjwt added a legacy key", user))
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), because):
			for _, want := range []string{name, `"certificateauthorities/signjwt"`, `verb "create"`} {
				if !strings.Contains(err.Error(), want) {
					return framework.Permanent(fmt.Errorf("refusal %q does not name %s", err, want))
				}
			}
			return nil
		}
		return err
	})
	framework.Eventually(t, 30*time.Second, "removing a key", func(ctx context.Context) error {
		return edit(ctx, func(k []rotationv1alpha1.LegacyPublicKey) []rotationv1alpha1.LegacyPublicKey {
			var out []rotationv1alpha1.LegacyPublicKey
			for _, e := range k {
				if e.PublicKey != drop {
					out = append(out, e)
				}
			}
			return out
		})
	})
	ca, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if k := ca.Spec.ServiceAccountTokens.LegacyPublicKeys; len(k) != 1 || k[0].PublicKey != keep {
		t.Fatalf("legacyPublicKeys after the editor's changes: %d entries, want only the kept key", len(k))
	}
}
