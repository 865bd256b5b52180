package e2e

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/test/framework"
)

// TestRotatingIsItsOwnPermission: editing CAs does not let one rotate them;
// the shipped rekey:ca-rotator role does, through the aggregator.
func TestRotatingIsItsOwnPermission(t *testing.T) {
	ctx := context.Background()
	clusterRole(t, "e2e-ca-editor", rbacv1.PolicyRule{
		APIGroups: []string{"rotation.rekey.io"}, Resources: []string{"certificateauthorities", "certificateauthorities/status"}, Verbs: []string{"*"},
	})
	editor, _ := userClient(t, "ca-editor")
	bind(t, "ca-editor", "e2e-ca-editor")
	framework.Eventually(t, settleTimeout, "ca-editor reading a CA", func(ctx context.Context) error {
		_, err := editor.RotationV1alpha1().CertificateAuthorities().Get(ctx, "rekey.io-kubelet-serving", metav1.GetOptions{})
		return err
	})
	_, err := editor.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "rekey.io-kubelet-serving", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete}, metav1.CreateOptions{})
	requireForbidden(t, err, "certificateauthorities/rotate")

	rotator, _ := userClient(t, "ca-rotator")
	bind(t, "ca-rotator", "rekey:ca-rotator")
	// Complete on a CA that never rotated reaches rekey (authorized) and
	// is refused there with the phase named: no CA is changed by the test.
	framework.Eventually(t, settleTimeout, "Complete as ca-rotator reaching rekey", func(ctx context.Context) error {
		_, err := rotator.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "rekey.io-kubelet-serving", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete}, metav1.CreateOptions{})
		switch {
		case err == nil:
			t.Fatal("Complete was accepted on a CA that never rotated")
		case !isConflictNamingPhase(err):
			return err // RBAC not seen yet
		}
		return nil
	})
}
