// Package certificateauthority stores CertificateAuthorities: the main
// resource writes spec (immutable after create, and only key stores the
// server allows), /status is written by rekey's controllers only.
package certificateauthority

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/apis/rotation/validation"
	"rekey.io/rekey/pkg/registry"
	"rekey.io/rekey/pkg/signing/keystorepaths"
)

const apiVersion = "rotation.rekey.io/v1alpha1"

// caStrategy is the main resource's strategy.
type caStrategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	// allowed are the PKCS#11 modules and key-store directories a CA may
	// name (the server's flags).
	allowed keystorepaths.Allowed
}

// NewStrategy returns the main resource's strategy.
func NewStrategy(typer runtime.ObjectTyper, allowed keystorepaths.Allowed) caStrategy {
	return caStrategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator, allowed: allowed}
}

func (caStrategy) NamespaceScoped() bool { return false }

// GetResetFields: status is not the main resource's.
func (caStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// PrepareForCreate clears status: the controllers make the key and report.
func (caStrategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	ca := obj.(*rotation.CertificateAuthority)
	ca.Status = rotation.CertificateAuthorityStatus{}
	ca.Generation = 1
}

// PrepareForUpdate keeps status and moves generation with spec (only
// spec.publish may change).
func (caStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	ca, prev := obj.(*rotation.CertificateAuthority), old.(*rotation.CertificateAuthority)
	ca.Status = prev.Status
	if !equality.Semantic.DeepEqual(ca.Spec, prev.Spec) {
		ca.Generation = prev.Generation + 1
	}
}

// Validate checks a new CA, including that its key store names only what
// the server allows.
func (s caStrategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	ca := obj.(*rotation.CertificateAuthority)
	return append(validation.ValidateCertificateAuthority(ca), validation.ValidateKeyStorePaths(ca, s.allowed)...)
}

func (caStrategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }
func (caStrategy) Canonicalize(runtime.Object)                               {}
func (caStrategy) AllowCreateOnUpdate(context.Context) bool                  { return false }
func (caStrategy) AllowUnconditionalUpdate(context.Context) bool             { return true }

func (caStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateCertificateAuthorityUpdate(obj.(*rotation.CertificateAuthority), old.(*rotation.CertificateAuthority))
}

func (caStrategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

// statusStrategy serves /status: the controllers' alone.
type statusStrategy struct{ caStrategy }

// NewStatusStrategy returns the /status strategy.
func NewStatusStrategy(base caStrategy) statusStrategy { return statusStrategy{base} }

// GetResetFields: spec is not /status's.
func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// PrepareForUpdate keeps spec and metadata.
func (statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	ca, prev := obj.(*rotation.CertificateAuthority), old.(*rotation.CertificateAuthority)
	ca.Spec = prev.Spec
	registry.KeepMetadata(ca, prev)
}

// ValidateUpdate refuses anyone but the controllers, then checks status.
func (statusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	if errs := registry.ControllersOnly(ctx); len(errs) > 0 {
		return errs
	}
	return validation.ValidateCertificateAuthorityStatusUpdate(obj.(*rotation.CertificateAuthority), old.(*rotation.CertificateAuthority))
}
