// Package nodeattestation stores NodeAttestations: the node writes spec
// (its EK and AK), rekey alone writes status (the challenge and what it
// verified).
package nodeattestation

import (
	"bytes"
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"rekey.io/rekey/pkg/apis/attestation"
	"rekey.io/rekey/pkg/apis/attestation/validation"
	"rekey.io/rekey/pkg/registry"
)

const apiVersion = "attestation.rekey.io/v1alpha1"

type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NewStrategy returns the main resource's strategy.
func NewStrategy(typer runtime.ObjectTyper) strategy {
	return strategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator}
}

func (strategy) NamespaceScoped() bool { return false }

// GetResetFields: status is not the main resource's.
func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// PrepareForCreate clears status: only rekey reports.
func (strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	n := obj.(*attestation.NodeAttestation)
	n.Status = attestation.NodeAttestationStatus{}
	n.Generation = 1
}

// PrepareForUpdate keeps status; a new EK, AK or policy is a new
// generation, and drops the outstanding challenge, which was made for the
// old ones.
func (strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	n, prev := obj.(*attestation.NodeAttestation), old.(*attestation.NodeAttestation)
	n.Status = prev.Status
	n.Generation = prev.Generation
	if n.Spec.PolicyName != prev.Spec.PolicyName || !bytes.Equal(n.Spec.EKCertificate, prev.Spec.EKCertificate) ||
		!bytes.Equal(n.Spec.EKPublic, prev.Spec.EKPublic) || !bytes.Equal(n.Spec.AKPublic, prev.Spec.AKPublic) {
		n.Generation++
		n.Status.Challenge = nil
		n.Status.Phase = ""
	}
}

func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateNodeAttestation(obj.(*attestation.NodeAttestation))
}
func (strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateNodeAttestationUpdate(obj.(*attestation.NodeAttestation), old.(*attestation.NodeAttestation))
}
func (strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }
func (strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}
func (strategy) Canonicalize(runtime.Object)                   {}
func (strategy) AllowCreateOnUpdate(context.Context) bool      { return false }
func (strategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// serverStatusStrategy writes status only, keeping spec and metadata: the
// strategy of the StatusWriter, whose callers (the challenge subresource,
// the attestation of a request) decide what is written.
type serverStatusStrategy struct{ strategy }

// GetResetFields: spec is not status's.
func (serverStatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// PrepareForUpdate keeps spec and metadata.
func (serverStatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	n, prev := obj.(*attestation.NodeAttestation), old.(*attestation.NodeAttestation)
	n.Spec = prev.Spec
	registry.KeepMetadata(n, prev)
}

func (serverStatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateNodeAttestationStatusUpdate(obj.(*attestation.NodeAttestation), old.(*attestation.NodeAttestation))
}

// statusStrategy serves /status: the same, for rekey's own identity alone.
type statusStrategy struct{ serverStatusStrategy }

// ValidateUpdate refuses anyone but rekey itself, then checks status.
func (s statusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	if errs := registry.ControllersOnly(ctx); len(errs) > 0 {
		return errs
	}
	return s.serverStatusStrategy.ValidateUpdate(ctx, obj, old)
}
