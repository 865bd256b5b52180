package framework

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

// ImmediateRotation is spec.rotation for a CA whose rotation a test drives
// for something other than the wait for trust: the new CA signs as soon as
// every bundle rekey writes holds it (no trustPropagation), and rekey-agent
// renews at once after Prepared (no renewalWindow). The defaults (2m, 10m)
// would hold such a test for minutes.
func ImmediateRotation() *rotationv1alpha1.RotationPolicy {
	return &rotationv1alpha1.RotationPolicy{
		TrustPropagation: &metav1.Duration{},
		RenewalWindow:    &metav1.Duration{},
	}
}

// SetImmediateRotation sets spec.rotation of an existing CA (a built-in
// one, or one created elsewhere) to ImmediateRotation; spec.rotation is
// mutable, so a test does this before it starts a rotation.
func SetImmediateRotation(ctx context.Context, client clientset.Interface, name string) error {
	patch := []byte(`{"spec":{"rotation":{"trustPropagation":"0s","renewalWindow":"0s"}}}`)
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("setting spec.rotation of CertificateAuthority %s to 0s/0s: %w", name, err)
	}
	return nil
}
