package trustconsumer

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/registry"
	"rekey.io/rekey/pkg/registry/printers"
)

// table prints what `kubectl get trustconsumers` shows.
var table = printers.Table[*rotation.TrustConsumer]{
	Columns: []metav1.TableColumnDefinition{
		{Name: "CAs", Type: "string", Description: "The CertificateAuthorities the consumer verifies with."},
		{Name: "Reporter", Type: "string", Description: "The user that registered the consumer and alone reports for it."},
		{Name: "Age", Type: "string", Description: "Time since creation."},
	},
	Row: func(c *rotation.TrustConsumer) []interface{} {
		return []interface{}{strings.Join(c.Spec.CertificateAuthorities, ","), c.Spec.Reporter, printers.Age(c.CreationTimestamp)}
	},
}

// Storage holds the main resource and /status.
type Storage struct {
	TrustConsumer *registry.REST
	Status        *registry.SubresourceREST
}

// NewStorage returns the main and /status storage; clk stamps reports.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, clk clock.PassiveClock) (*Storage, error) {
	s := NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &rotation.TrustConsumer{} },
		NewListFunc:               func() runtime.Object { return &rotation.TrustConsumerList{} },
		DefaultQualifiedResource:  rotation.Resource("trustconsumers"),
		SingularQualifiedResource: rotation.Resource("trustconsumer"),
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		ResetFieldsStrategy:       s,
		TableConvertor:            table,
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter}); err != nil {
		return nil, err
	}
	return &Storage{
		TrustConsumer: registry.NewREST(store, "tc"),
		Status:        registry.NewSubresourceREST(store, NewStatusStrategy(s, clk)),
	}, nil
}
