// Package signer stores Signers: the main resource writes spec (and never
// status), /status is written by rekey's controllers only.
package signer

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/registry"
)

const apiVersion = "certificates.rekey.io/v1alpha1"

// signerStrategy is the main resource's strategy.
type signerStrategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NewStrategy returns the main resource's strategy.
func NewStrategy(typer runtime.ObjectTyper) signerStrategy {
	return signerStrategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator}
}

func (signerStrategy) NamespaceScoped() bool { return false }

// GetResetFields: status is not the main resource's.
func (signerStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// PrepareForCreate clears status: the controllers report readiness.
func (signerStrategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	s := obj.(*certificates.Signer)
	s.Status = certificates.SignerStatus{}
	s.Generation = 1
}

// PrepareForUpdate keeps status and moves generation with spec.
func (signerStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	s, prev := obj.(*certificates.Signer), old.(*certificates.Signer)
	s.Status = prev.Status
	if !equality.Semantic.DeepEqual(s.Spec, prev.Spec) {
		s.Generation = prev.Generation + 1
	}
}

func (signerStrategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateSigner(obj.(*certificates.Signer))
}

func (signerStrategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }
func (signerStrategy) Canonicalize(runtime.Object)                               {}
func (signerStrategy) AllowCreateOnUpdate(context.Context) bool                  { return false }
func (signerStrategy) AllowUnconditionalUpdate(context.Context) bool             { return true }

func (signerStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateSignerUpdate(obj.(*certificates.Signer), old.(*certificates.Signer))
}

func (signerStrategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

// statusStrategy serves /status: the controllers' alone.
type statusStrategy struct{ signerStrategy }

// NewStatusStrategy returns the /status strategy.
func NewStatusStrategy(base signerStrategy) statusStrategy { return statusStrategy{base} }

// GetResetFields: spec is not /status's.
func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// PrepareForUpdate keeps spec and metadata.
func (statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	s, prev := obj.(*certificates.Signer), old.(*certificates.Signer)
	s.Spec = prev.Spec
	registry.KeepMetadata(s, prev)
}

// ValidateUpdate refuses anyone but the controllers, then checks status.
func (statusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	if errs := registry.ControllersOnly(ctx); len(errs) > 0 {
		return errs
	}
	return validation.ValidateSignerStatusUpdate(obj.(*certificates.Signer), old.(*certificates.Signer))
}
