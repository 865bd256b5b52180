// Package registry holds what rekey's storages share: the main resource's
// REST with short names and categories, the REST of a subresource that
// updates with its own strategy, and the rules every status-like
// subresource follows (metadata is the main resource's; some status is the
// controllers' alone).
package registry

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"rekey.io/rekey/pkg/serveridentity"
)

// REST is a main resource with short names and categories.
type REST struct {
	*genericregistry.Store
	shortNames []string
}

// NewREST wraps a completed store.
func NewREST(store *genericregistry.Store, shortNames ...string) *REST {
	return &REST{Store: store, shortNames: shortNames}
}

// ShortNames lets kubectl use the short names.
func (r *REST) ShortNames() []string { return r.shortNames }

// Categories puts every rekey kind in `kubectl get rekey`.
func (r *REST) Categories() []string { return []string{"rekey"} }

// SubresourceREST serves get and update of a subresource such as /status.
type SubresourceREST struct {
	store *genericregistry.Store
}

// SubresourceStrategy is the update strategy of a subresource.
type SubresourceStrategy interface {
	rest.RESTUpdateStrategy
	rest.ResetFieldsStrategy
}

// NewSubresourceREST returns storage over a shallow copy of the main store
// that updates with the subresource's strategy.
func NewSubresourceREST(store *genericregistry.Store, strategy SubresourceStrategy) *SubresourceREST {
	s := *store
	s.UpdateStrategy = strategy
	s.ResetFieldsStrategy = strategy
	return &SubresourceREST{store: &s}
}

var _ rest.Patcher = &SubresourceREST{}

func (r *SubresourceREST) New() runtime.Object { return r.store.New() }

// Destroy does nothing: the main resource owns the shared store.
func (r *SubresourceREST) Destroy() {}

func (r *SubresourceREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

func (r *SubresourceREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

func (r *SubresourceREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

func (r *SubresourceREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

// KeepMetadata sets obj's metadata to old's, except managed fields (which
// the server has just computed for this write) and the resource version
// (already checked against old's for optimistic concurrency): a
// subresource is authorized separately from the main resource and must not
// become a way to change labels, annotations, finalizers or owners, as for
// the status subresource of a custom resource.
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

// ControllersOnly refuses a write of status by anyone but rekey's own
// controllers (package serveridentity), for kinds whose status records
// what the server decided, such as which key a CA signs with.
func ControllersOnly(ctx context.Context) field.ErrorList {
	if serveridentity.FromContext(ctx) {
		return nil
	}
	return field.ErrorList{field.Forbidden(field.NewPath("status"),
		"written only by rekey-apiserver's own controllers; it records what the server decided (such as which key signs) and no client may set it")}
}
