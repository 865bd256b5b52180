package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

// settleTimeout is how long the tests wait for what follows a change
// within moments: an RBAC change reaching the authorizer caches of both API
// servers, an informer seeing a new object, an event being recorded.
const settleTimeout = 20 * time.Second

// bind gives user the named ClusterRoles and waits until RBAC has seen it.
func bind(t *testing.T, user string, roles ...string) {
	t.Helper()
	ctx := context.Background()
	for _, role := range roles {
		name := fmt.Sprintf("e2e-%s-%s", strings.NewReplacer(":", "-", "/", "-", "*", "all").Replace(user), strings.NewReplacer(":", "-", "/", "-").Replace(role))
		_, err := cluster.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("binding %s to %s: %v", user, role, err)
		}
	}
}

// clusterRole creates a ClusterRole.
func clusterRole(t *testing.T, name string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	_, err := cluster.Admin.RbacV1().ClusterRoles().Create(context.Background(), &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules,
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating ClusterRole %s: %v", name, err)
	}
}

func userClient(t *testing.T, user string, groups ...string) (clientset.Interface, string) {
	t.Helper()
	c, kubeconfig, err := cluster.UserClient(user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	return c, kubeconfig
}

func csrFor(t *testing.T, name, signer string) *certv1alpha1.CertificateSigningRequest {
	return &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request:           fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: name}),
			SignerName:        signer,
			ExpirationSeconds: ptr.To[int32](3600),
			Usages:            []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth},
		},
	}
}

// create makes a CSR as the admin, retrying while RBAC caches warm up.
func create(t *testing.T, client clientset.Interface, csr *certv1alpha1.CertificateSigningRequest) *certv1alpha1.CertificateSigningRequest {
	t.Helper()
	var out *certv1alpha1.CertificateSigningRequest
	framework.Eventually(t, settleTimeout, "creating "+csr.Name, func(ctx context.Context) error {
		var err error
		out, err = client.CertificatesV1alpha1().CertificateSigningRequests().Create(context.Background(), csr, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			out, err = client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), csr.Name, metav1.GetOptions{})
		}
		return err
	})
	return out
}

func withCondition(csr *certv1alpha1.CertificateSigningRequest, typ certv1alpha1.RequestConditionType) *certv1alpha1.CertificateSigningRequest {
	out := csr.DeepCopy()
	out.Status.Conditions = append(out.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
		Type: typ, Status: metav1.ConditionTrue, Reason: "E2E", Message: "set by the e2e test",
	})
	return out
}

func approve(t *testing.T, client clientset.Interface, name string) error {
	t.Helper()
	csr, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	_, err = client.CertificatesV1alpha1().CertificateSigningRequests().UpdateApproval(context.Background(), name, withCondition(csr, certv1alpha1.CertificateApproved), metav1.UpdateOptions{})
	return err
}

func setCertificate(t *testing.T, client clientset.Interface, name string) error {
	t.Helper()
	csr, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	csr.Status.Certificate = fixtures.SelfSignedCertPEM(t, name)
	_, err = client.CertificatesV1alpha1().CertificateSigningRequests().UpdateStatus(context.Background(), csr, metav1.UpdateOptions{})
	return err
}

func isApproved(t *testing.T, name string) bool {
	t.Helper()
	csr, err := cluster.RekeyAdmin.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range csr.Status.Conditions {
		if c.Type == certv1alpha1.CertificateApproved {
			return true
		}
	}
	return false
}

// requireForbidden checks a 403 whose message names every part of the
// missing permission.
func requireForbidden(t *testing.T, err error, mentions ...string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("want 403 Forbidden, got %v", err)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("403 message does not name %s: %v", m, err)
		}
	}
}

func isConflictNamingPhase(err error) bool {
	return apierrors.IsConflict(err) && strings.Contains(err.Error(), "cannot Complete: phase is")
}
