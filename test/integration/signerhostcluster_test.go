package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/framework"
)

// TestSignerHostCluster runs the SignerHostCluster admission plugin behind
// a real kube-apiserver with RBAC: a user with every rekey right over a
// Signer (write it, sign for its name in certificates.rekey.io, use its
// CA) is refused spec.hostCluster unless kube RBAC also lets them sign,
// and for NodeClient approval approve, for the signer name in
// certificates.k8s.io; with those grants the same Signer is admitted.
// Without the plugin, rekey's own grants on those names (artifacts/deploy)
// would be theirs to use.
func TestSignerHostCluster(t *testing.T) {
	t.Parallel()
	cluster := kubeCluster(t)
	ctx := context.Background()
	admin := cluster.Admin

	// The cluster is shared (kubeCluster): every name here carries "shc".
	const (
		domain = "it-shc.example.com"
		ca     = "it-shc-ca"
	)
	roles := map[string][]rbacv1.PolicyRule{
		// Every rekey right over the domain's Signers.
		"it-shc-rekey-owner": {
			{APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"signers"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"signers"}, ResourceNames: []string{domain + "/*"}, Verbs: []string{"sign", "approve"}},
			{APIGroups: []string{"rotation.rekey.io"}, Resources: []string{"certificateauthorities"}, ResourceNames: []string{ca}, Verbs: []string{"get", "use"}},
		},
		"it-shc-host-sign":    {{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"}, ResourceNames: []string{domain + "/*"}, Verbs: []string{"sign"}}},
		"it-shc-host-approve": {{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"}, ResourceNames: []string{domain + "/nodes"}, Verbs: []string{"approve"}}},
	}
	for name, rules := range roles {
		if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	bind := func(user string, roles ...string) clientset.Interface {
		for _, role := range roles {
			name := "it-" + user + "-" + role
			if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
				Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatalf("binding %s to %s: %v", user, role, err)
			}
			t.Cleanup(func() {
				_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
			})
		}
		c, _, err := cluster.UserClient(user)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	editor := bind("shc-editor", "it-shc-rekey-owner")
	signer := bind("shc-signer", "it-shc-rekey-owner", "it-shc-host-sign")
	approver := bind("shc-approver", "it-shc-rekey-owner", "it-shc-host-sign", "it-shc-host-approve")

	newSigner := func(short string, mode certv1alpha1.ApprovalMode, hc *certv1alpha1.HostClusterServing) *certv1alpha1.Signer {
		return &certv1alpha1.Signer{
			ObjectMeta: metav1.ObjectMeta{Name: domain + ":" + short},
			Spec: certv1alpha1.SignerSpec{
				SignerName:              domain + "/" + short,
				CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: ca},
				Policy: certv1alpha1.SignerPolicy{
					AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth, certv1alpha1.UsageServerAuth},
					MaxDuration:   metav1.Duration{Duration: 24 * time.Hour},
				},
				Approval:    certv1alpha1.SignerApproval{Mode: mode},
				HostCluster: hc,
			},
		}
	}
	csrs := func() *certv1alpha1.HostClusterServing {
		return &certv1alpha1.HostClusterServing{CertificateSigningRequests: true}
	}
	pods := func() *certv1alpha1.HostClusterServing {
		return &certv1alpha1.HostClusterServing{PodCertificateRequests: &certv1alpha1.PodCertificatePolicy{
			Allowed: []certv1alpha1.PodCertificateSubjects{{Namespace: "it-shc"}}}}
	}
	for _, short := range []string{"plain", "pods", "nodes"} {
		t.Cleanup(func() {
			_ = cluster.RekeyAdmin.CertificatesV1alpha1().Signers().Delete(context.Background(), domain+":"+short, metav1.DeleteOptions{})
		})
	}
	forbidden := func(t *testing.T, err error, mentions ...string) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Fatalf("want 403 Forbidden, got %v", err)
		}
		for _, m := range mentions {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("403 does not name %s: %v", m, err)
			}
		}
	}
	signerSettle := func(t *testing.T, c clientset.Interface, what string, s *certv1alpha1.Signer) {
		t.Helper()
		framework.Eventually(t, tcSettle, what, func(ctx context.Context) error {
			_, err := c.CertificatesV1alpha1().Signers().Create(ctx, s, metav1.CreateOptions{})
			return err
		})
	}

	// The editor's rekey rights work: a Signer without spec.hostCluster is
	// admitted (retried until the bindings reach rekey's authorizer).
	signerSettle(t, editor, "shc-editor creating a Signer without spec.hostCluster", newSigner("plain", certv1alpha1.ApprovalManual, nil))

	t.Run("rekey rights alone do not lend the host cluster's sign", func(t *testing.T) {
		_, err := editor.CertificatesV1alpha1().Signers().Create(ctx, newSigner("pods", certv1alpha1.ApprovalManual, pods()), metav1.CreateOptions{})
		forbidden(t, err, "spec.hostCluster", `user "shc-editor"`, `verb "sign"`, `group "certificates.k8s.io"`, `resourceName "it-shc.example.com/pods" or "it-shc.example.com/*"`)
		// Nor may the editor add it to the Signer they have.
		cur, err := editor.CertificatesV1alpha1().Signers().Get(ctx, domain+":plain", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.HostCluster = csrs()
		_, err = editor.CertificatesV1alpha1().Signers().Update(ctx, cur, metav1.UpdateOptions{})
		forbidden(t, err, "spec.hostCluster", `verb "sign"`, `group "certificates.k8s.io"`)
		got, err := cluster.RekeyAdmin.CertificatesV1alpha1().Signers().Get(ctx, domain+":plain", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.HostCluster != nil {
			t.Fatalf("the refused update landed: %+v", got.Spec.HostCluster)
		}
	})

	t.Run("the host cluster's sign admits it", func(t *testing.T) {
		signerSettle(t, signer, "shc-signer creating a Signer serving PodCertificateRequests", newSigner("pods", certv1alpha1.ApprovalManual, pods()))
		// Manual approval of native requests needs sign only.
		framework.Eventually(t, tcSettle, "shc-signer adding native requests to its Signer", func(ctx context.Context) error {
			cur, err := signer.CertificatesV1alpha1().Signers().Get(ctx, domain+":plain", metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Spec.HostCluster = csrs()
			_, err = signer.CertificatesV1alpha1().Signers().Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
	})

	t.Run("NodeClient approval needs the host cluster's approve", func(t *testing.T) {
		_, err := signer.CertificatesV1alpha1().Signers().Create(ctx, newSigner("nodes", certv1alpha1.ApprovalNodeClient, csrs()), metav1.CreateOptions{})
		forbidden(t, err, "spec.hostCluster.certificateSigningRequests", "NodeClient", `user "shc-signer"`, `verb "approve"`, `group "certificates.k8s.io"`)
		signerSettle(t, approver, "shc-approver creating a NodeClient Signer", newSigner("nodes", certv1alpha1.ApprovalNodeClient, csrs()))
		// Turning it on for the Manual Signer is the same lending.
		cur, err := signer.CertificatesV1alpha1().Signers().Get(ctx, domain+":plain", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Approval.Mode = certv1alpha1.ApprovalNodeClient
		_, err = signer.CertificatesV1alpha1().Signers().Update(ctx, cur, metav1.UpdateOptions{})
		forbidden(t, err, `verb "approve"`)
	})
}
