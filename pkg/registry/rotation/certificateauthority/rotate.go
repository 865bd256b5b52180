package certificateauthority

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/apis/rotation/validation"
	"rekey.io/rekey/pkg/registry"
)

// RotateREST serves POST of a Rotation to certificateauthorities/NAME/rotate:
// it records the phase the rotation controller then walks (Preparing for
// Start, Completing for Complete) and answers with the CertificateAuthority.
// The CertificateAuthorityRotation admission plugin has checked the phase
// by then; the update checks it again inside the storage's
// compare-and-swap, so two concurrent requests cannot both start.
type RotateREST struct {
	store *genericregistry.Store
	clock clock.PassiveClock
}

var (
	_ rest.NamedCreater             = &RotateREST{}
	_ rest.GroupVersionKindProvider = &RotateREST{}
)

// NewRotateREST returns the rotate subresource over the main store.
func NewRotateREST(store *genericregistry.Store, base caStrategy, clk clock.PassiveClock) *RotateREST {
	s := *store
	strategy := rotateStrategy{base}
	s.UpdateStrategy = strategy
	s.ResetFieldsStrategy = strategy
	return &RotateREST{store: &s, clock: clk}
}

// New returns the request kind.
func (r *RotateREST) New() runtime.Object { return &rotation.Rotation{} }

// Destroy does nothing: the main resource owns the store.
func (r *RotateREST) Destroy() {}

// GroupVersionKind says the subresource takes Rotations.
func (r *RotateREST) GroupVersionKind(containingGV schema.GroupVersion) schema.GroupVersionKind {
	return containingGV.WithKind("Rotation")
}

// Create starts or completes a rotation.
func (r *RotateREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	if options == nil {
		options = &metav1.CreateOptions{}
	}
	rot, ok := obj.(*rotation.Rotation)
	if !ok {
		return nil, apierrors.NewBadRequest("the rotate subresource takes a Rotation")
	}
	if errs := validation.ValidateRotation(rot); len(errs) > 0 {
		return nil, apierrors.NewInvalid(rotation.Kind("Rotation"), name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, rot.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	transition := func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
		ca := old.(*rotation.CertificateAuthority).DeepCopy()
		if err := validation.CheckTransition(ca, rot); err != nil {
			return nil, apierrors.NewConflict(rotation.Resource("certificateauthorities"), name, err)
		}
		now := metav1.NewTime(r.clock.Now())
		switch rot.Action {
		case rotation.RotationStart:
			ca.Status.Phase = rotation.PhasePreparing
			ca.Status.LastInitiationTime = &now
			ca.Status.LastInitiationFinishedTime = nil
			ca.Status.LastCompletionTriggeredTime = nil
			ca.Status.LastCompletionTime = nil
			ca.Status.PendingRenewal, ca.Status.PendingRenewals = 0, nil
		case rotation.RotationComplete:
			ca.Status.Phase = rotation.PhaseCompleting
			ca.Status.LastCompletionTriggeredTime = &now
		}
		return ca, nil
	}
	updateOptions := &metav1.UpdateOptions{DryRun: options.DryRun, FieldManager: options.FieldManager}
	updated, _, err := r.store.Update(ctx, name, rest.DefaultUpdatedObjectInfo(nil, transition), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, updateOptions)
	return updated, err
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
