package specstatus

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
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

// StatusREST serves get and update of /status.
type StatusREST struct {
	store *genericregistry.Store
}

// NewStatusREST returns /status storage over a copy of the main store with
// the status strategy.
func NewStatusREST[T Object](store *genericregistry.Store, strategy StatusStrategy[T]) *StatusREST {
	s := *store
	s.UpdateStrategy = strategy
	s.ResetFieldsStrategy = strategy
	return &StatusREST{store: &s}
}

var _ rest.Patcher = &StatusREST{}

func (r *StatusREST) New() runtime.Object { return r.store.New() }

// Destroy does nothing: the main resource owns the shared store.
func (r *StatusREST) Destroy() {}

func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}
