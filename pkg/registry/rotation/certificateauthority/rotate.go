package certificateauthority

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/apis/rotation/validation"
	"rekey.io/rekey/pkg/registry"
	"rekey.io/rekey/pkg/registry/rotation/rotate"
)

// NewRotateREST returns certificateauthorities/NAME/rotate: it records
// the phase the rotation controller then walks (Preparing for Start,
// Completing for Complete; Prepare with force records the override of the
// wait for trust). The CertificateAuthorityRotation admission
// plugin has checked the phase by then; the transition checks it again
// inside the storage's compare-and-swap, so two concurrent requests cannot
// both start.
func NewRotateREST(store *genericregistry.Store, base caStrategy, clk clock.PassiveClock) *rotate.REST {
	return rotate.NewREST(store, rotateStrategy{base}, clk, transition)
}

func transition(stored runtime.Object, rot *rotation.Rotation, now metav1.Time) (runtime.Object, error) {
	ca := stored.(*rotation.CertificateAuthority).DeepCopy()
	if err := validation.CheckTransition(ca, rot, now.Time); err != nil {
		return nil, apierrors.NewConflict(rotation.Resource("certificateauthorities"), ca.Name, err)
	}
	switch rot.Action {
	case rotation.RotationStart:
		ca.Status.Phase = rotation.PhasePreparing
		ca.Status.LastInitiationTime = &now
		ca.Status.LastInitiationFinishedTime = nil
		ca.Status.LastCompletionTriggeredTime = nil
		ca.Status.LastCompletionTime = nil
		ca.Status.PendingRenewal, ca.Status.PendingRenewals = 0, nil
		ca.Status.Next, ca.Status.Trust = nil, nil
		// The last rotation's TrustPropagated=True must not read as this
		// one's: until the controller's first look, the new CA is not
		// published anywhere.
		apimeta.SetStatusCondition(&ca.Status.Conditions, metav1.Condition{
			Type: rotation.CertificateAuthorityTrustPropagated, Status: metav1.ConditionFalse, Reason: rotation.ReasonWaitingForPublication,
			Message: "rotation started: the new CA is being made; the current CA signs", ObservedGeneration: ca.Generation, LastTransitionTime: now,
		})
	case rotation.RotationPrepare:
		// Force only (validated): the controller stops waiting for trust.
		if ca.Status.Trust == nil {
			ca.Status.Trust = &rotation.TrustStatus{}
		}
		if ca.Status.Trust.OverriddenTime == nil {
			ca.Status.Trust.OverriddenTime = &now
		}
	case rotation.RotationComplete:
		ca.Status.Phase = rotation.PhaseCompleting
		ca.Status.LastCompletionTriggeredTime = &now
	}
	return ca, nil
}

// rotateStrategy lets the rotate subresource move the phase and its times;
// spec and metadata stay.
type rotateStrategy struct{ caStrategy }

func (rotateStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

func (rotateStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	ca, prev := obj.(*rotation.CertificateAuthority), old.(*rotation.CertificateAuthority)
	ca.Spec = prev.Spec
	registry.KeepMetadata(ca, prev)
}

func (rotateStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateCertificateAuthorityStatusUpdate(obj.(*rotation.CertificateAuthority), old.(*rotation.CertificateAuthority))
}
