package signer

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/registry"
	"rekey.io/rekey/pkg/registry/printers"
)

// table prints what `kubectl get rsigner` shows.
var table = printers.Table[*certificates.Signer]{
	Columns: []metav1.TableColumnDefinition{
		{Name: "SignerName", Type: "string", Description: "The name requests use."},
		{Name: "CA", Type: "string", Description: "The CertificateAuthority that signs."},
		{Name: "Approval", Type: "string", Description: "Manual, NodeClient or Attestation."},
		{Name: "MaxDuration", Type: "string", Description: "Longest certificate lifetime."},
		{Name: "Ready", Type: "string", Description: "Whether the signer can sign."},
		{Name: "Age", Type: "string", Description: "Time since creation."},
	},
	Row: func(s *certificates.Signer) []interface{} {
		return []interface{}{s.Spec.SignerName, s.Spec.CertificateAuthorityRef.Name, string(s.Spec.Approval.Mode),
			duration.HumanDuration(s.Spec.Policy.MaxDuration.Duration),
			printers.ConditionStatus(s.Status.Conditions, certificates.SignerReady), printers.Age(s.CreationTimestamp)}
	},
}

// NewStorage returns the main and /status storage.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*registry.REST, *registry.SubresourceREST, error) {
	strategy := NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &certificates.Signer{} },
		NewListFunc:               func() runtime.Object { return &certificates.SignerList{} },
		DefaultQualifiedResource:  certificates.Resource("signers"),
		SingularQualifiedResource: certificates.Resource("signer"),
		CreateStrategy:            strategy,
		UpdateStrategy:            strategy,
		DeleteStrategy:            strategy,
		ResetFieldsStrategy:       strategy,
		TableConvertor:            table,
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter}); err != nil {
		return nil, nil, err
	}
	return registry.NewREST(store, "rsigner"), registry.NewSubresourceREST(store, NewStatusStrategy(strategy)), nil
}
