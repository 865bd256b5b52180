// Package specstatus is the strategy shared by rekey's kinds that follow the
// plain spec/status split: the main resource writes spec (and never status),
// /status writes status (and never spec), and generation moves with spec.
package specstatus

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"rekey.io/rekey/pkg/serveridentity"
)

// Object is an API object with metadata.
type Object interface {
	runtime.Object
	metav1.Object
}

// Kind describes one kind to the strategy.
type Kind[T Object] struct {
	// APIVersion is "group/version" for reset fields.
	APIVersion string
	// NamespaceScoped says whether objects live in namespaces.
	NamespaceScoped bool
	// Spec and Status return pointers to the two halves, for copying and
	// comparing.
	Spec   func(T) any
	Status func(T) any
	// ResetStatus clears status on create.
	ResetStatus func(T)
	// CopyStatus sets dst's status to src's, CopySpec its spec.
	CopyStatus func(dst, src T)
	CopySpec   func(dst, src T)
	// Validate, ValidateUpdate and ValidateStatusUpdate return field errors.
	Validate             func(T) field.ErrorList
	ValidateUpdate       func(newObj, oldObj T) field.ErrorList
	ValidateStatusUpdate func(newObj, oldObj T) field.ErrorList
	// StatusByControllersOnly refuses /status writes from anyone but rekey's
	// own controllers (package serveridentity): for kinds whose status
	// records what the server decided, such as which key a CA signs with.
	StatusByControllersOnly bool
}

// Strategy serves the main resource.
type Strategy[T Object] struct {
	runtime.ObjectTyper
	names.NameGenerator
	kind Kind[T]
}

// New returns the main resource's strategy.
func New[T Object](typer runtime.ObjectTyper, kind Kind[T]) Strategy[T] {
	return Strategy[T]{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator, kind: kind}
}

func (s Strategy[T]) NamespaceScoped() bool { return s.kind.NamespaceScoped }

func (s Strategy[T]) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(s.kind.APIVersion): fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

func (s Strategy[T]) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	o := obj.(T)
	s.kind.ResetStatus(o)
	o.SetGeneration(1)
}

func (s Strategy[T]) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	o, prev := obj.(T), old.(T)
	s.kind.CopyStatus(o, prev)
	if !equality.Semantic.DeepEqual(s.kind.Spec(o), s.kind.Spec(prev)) {
		o.SetGeneration(prev.GetGeneration() + 1)
	}
}

func (s Strategy[T]) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return s.kind.Validate(obj.(T))
}

func (s Strategy[T]) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string { return nil }

func (s Strategy[T]) Canonicalize(obj runtime.Object) {}

func (s Strategy[T]) AllowCreateOnUpdate(context.Context) bool { return false }

func (s Strategy[T]) AllowUnconditionalUpdate(context.Context) bool { return true }

func (s Strategy[T]) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return s.kind.ValidateUpdate(obj.(T), old.(T))
}

func (s Strategy[T]) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

// StatusStrategy serves /status.
type StatusStrategy[T Object] struct {
	Strategy[T]
}

// NewStatus returns the /status strategy.
func NewStatus[T Object](base Strategy[T]) StatusStrategy[T] { return StatusStrategy[T]{base} }

func (s StatusStrategy[T]) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(s.kind.APIVersion): fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

// PrepareForUpdate keeps the spec and all metadata but managed fields, as
// the status subresource of a custom resource does: /status is authorized
// separately from the main resource and must not become a way to change
// labels, annotations, finalizers or owners.
func (s StatusStrategy[T]) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	o, prev := obj.(T), old.(T)
	s.kind.CopySpec(o, prev)
	KeepMetadata(o, prev)
}

func (s StatusStrategy[T]) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	if s.kind.StatusByControllersOnly && !serveridentity.FromContext(ctx) {
		return field.ErrorList{field.Forbidden(field.NewPath("status"),
			"written only by rekey-apiserver's own controllers; it records what the server decided (such as which key signs) and no client may set it")}
	}
	return s.kind.ValidateStatusUpdate(obj.(T), old.(T))
}

// KeepMetadata sets obj's metadata to old's, except managed fields (which
// the server has just computed for this write) and the resource version
// (already checked against old's for optimistic concurrency).
func KeepMetadata(obj, old metav1.Object) {
	managed := obj.GetManagedFields()
	rv := obj.GetResourceVersion()
	obj.SetLabels(old.GetLabels())
	obj.SetAnnotations(old.GetAnnotations())
	obj.SetFinalizers(old.GetFinalizers())
	obj.SetOwnerReferences(old.GetOwnerReferences())
	obj.SetGenerateName(old.GetGenerateName())
	obj.SetGeneration(old.GetGeneration())
	obj.SetDeletionGracePeriodSeconds(old.GetDeletionGracePeriodSeconds())
	obj.SetManagedFields(managed)
	obj.SetResourceVersion(rv)
}
