package specstatus

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Resource describes one kind's storage.
type Resource[T Object] struct {
	New, NewList     func() runtime.Object
	Plural, Singular schema.GroupResource
	ShortNames       []string
	Table            Table[T]
	Kind             Kind[T]
}

// NewStorage returns the main and /status storage of a kind.
func NewStorage[T Object](scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, r Resource[T]) (*REST, *SubresourceREST, error) {
	strategy := New(scheme, r.Kind)
	store := &genericregistry.Store{
		NewFunc:                   r.New,
		NewListFunc:               r.NewList,
		DefaultQualifiedResource:  r.Plural,
		SingularQualifiedResource: r.Singular,
		CreateStrategy:            strategy,
		UpdateStrategy:            strategy,
		DeleteStrategy:            strategy,
		ResetFieldsStrategy:       strategy,
		TableConvertor:            r.Table,
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter}); err != nil {
		return nil, nil, err
	}
	return NewREST(store, r.ShortNames...), NewSubresourceREST(store, NewStatus(strategy)), nil
}

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
