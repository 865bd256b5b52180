package certificatesigningrequest

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/registry"
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
	Status                    *registry.SubresourceREST
	Approval                  *registry.SubresourceREST
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

		TableConvertor: tableConvertor,
	}
	options := &generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}
	if err := store.CompleteWithOptions(options); err != nil {
		return nil, err
	}

	return &Storage{
		CertificateSigningRequest: &REST{store},
		Status:                    registry.NewSubresourceREST(store, NewStatusStrategy(strategy)),
		Approval:                  registry.NewSubresourceREST(store, NewApprovalStrategy(strategy)),
	}, nil
}
