package certificatesigningrequest

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"rekey.io/rekey/pkg/apis/certificates"
)

// REST is the main resource's storage.
type REST struct {
	*genericregistry.Store
}

var _ rest.ShortNamesProvider = &REST{}
var _ rest.CategoriesProvider = &REST{}

// ShortNames lets `kubectl get rcsr` work.
func (r *REST) ShortNames() []string { return []string{"rcsr"} }

// Categories lets `kubectl get rekey` list requests among rekey's kinds.
func (r *REST) Categories() []string { return []string{"rekey"} }

// Storage holds the main resource and its two subresources.
type Storage struct {
	CertificateSigningRequest *REST
	Status                    *SubresourceREST
	Approval                  *SubresourceREST
}

// NewStorage builds the stores for the main resource, /status and /approval.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, clk clock.PassiveClock) (*Storage, error) {
	strategy := NewStrategy(scheme, clk)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &certificates.CertificateSigningRequest{} },
		NewListFunc:               func() runtime.Object { return &certificates.CertificateSigningRequestList{} },
		PredicateFunc:             Matcher,
		DefaultQualifiedResource:  certificates.Resource("certificatesigningrequests"),
		SingularQualifiedResource: certificates.Resource("certificatesigningrequest"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: tableConvertor{},
	}
	options := &generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}
	if err := store.CompleteWithOptions(options); err != nil {
		return nil, err
	}

	statusStore := *store
	status := NewStatusStrategy(strategy)
	statusStore.UpdateStrategy = status
	statusStore.ResetFieldsStrategy = status

	approvalStore := *store
	approval := NewApprovalStrategy(strategy)
	approvalStore.UpdateStrategy = approval
	approvalStore.ResetFieldsStrategy = approval

	return &Storage{
		CertificateSigningRequest: &REST{store},
		Status:                    &SubresourceREST{store: &statusStore},
		Approval:                  &SubresourceREST{store: &approvalStore},
	}, nil
}

// SubresourceREST serves get and update of /status or /approval.
type SubresourceREST struct {
	store *genericregistry.Store
}

var _ rest.Patcher = &SubresourceREST{}
var _ rest.Storage = &SubresourceREST{}

// New returns an empty object.
func (r *SubresourceREST) New() runtime.Object { return &certificates.CertificateSigningRequest{} }

// Destroy does nothing: the store is shared with the main resource, which
// owns its lifecycle.
func (r *SubresourceREST) Destroy() {}

// Get returns the whole object, so clients can read-modify-write.
func (r *SubresourceREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update applies the subresource's strategy. Creating through a subresource
// is never allowed.
func (r *SubresourceREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields returns the fields the subresource's strategy resets.
func (r *SubresourceREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints the same columns as the main resource.
func (r *SubresourceREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}
