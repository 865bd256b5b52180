// Package rotatingcredential stores RotatingCredentials: users write spec,
// rekey's controller alone writes status, and /rotate asks for a mint now
// or for the end of the grace period.
package rotatingcredential

import (
	"context"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/apis/rotation/validation"
	"rekey.io/rekey/pkg/registry"
)

const apiVersion = "rotation.rekey.io/v1alpha1"

type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NewStrategy returns the main resource's strategy.
func NewStrategy(typer runtime.ObjectTyper) strategy {
	return strategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator}
}

func (strategy) NamespaceScoped() bool { return true }

// GetResetFields: status is not the main resource's.
func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// PrepareForCreate clears status: only rekey reports.
func (strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	rc := obj.(*rotation.RotatingCredential)
	rc.Status = rotation.RotatingCredentialStatus{}
	rc.Generation = 1
}

// PrepareForUpdate keeps status; a spec change is a new generation.
func (strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	rc, prev := obj.(*rotation.RotatingCredential), old.(*rotation.RotatingCredential)
	rc.Status = prev.Status
	rc.Generation = prev.Generation
	if !specEqual(&rc.Spec, &prev.Spec) {
		rc.Generation++
	}
}

func specEqual(a, b *rotation.RotatingCredentialSpec) bool {
	return apiequality.Semantic.DeepEqual(a, b)
}

func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateRotatingCredential(obj.(*rotation.RotatingCredential))
}
func (strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateRotatingCredentialUpdate(obj.(*rotation.RotatingCredential), old.(*rotation.RotatingCredential))
}
func (strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }
func (strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}
func (strategy) Canonicalize(runtime.Object)                   {}
func (strategy) AllowCreateOnUpdate(context.Context) bool      { return false }
func (strategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// statusStrategy serves /status: rekey's controllers alone.
type statusStrategy struct{ strategy }

func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// PrepareForUpdate keeps spec and metadata, and the /rotate requests:
// only /rotate records them, so a status write made from a stale copy
// cannot drop a request.
func (statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	rc, prev := obj.(*rotation.RotatingCredential), old.(*rotation.RotatingCredential)
	rc.Spec = prev.Spec
	registry.KeepMetadata(rc, prev)
	st, was := &rc.Status, &prev.Status
	st.RotationRequestedTime, st.RotationRequestedGeneration = was.RotationRequestedTime, was.RotationRequestedGeneration
	st.CompletionRequestedTime, st.CompletionRequestedGeneration = was.CompletionRequestedTime, was.CompletionRequestedGeneration
}

// ValidateUpdate refuses anyone but rekey's controllers, then checks status.
func (statusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	if errs := registry.ControllersOnly(ctx); len(errs) > 0 {
		return errs
	}
	return validation.ValidateRotatingCredentialStatusUpdate(obj.(*rotation.RotatingCredential), old.(*rotation.RotatingCredential))
}
