// Package attestationpolicy stores AttestationPolicies (cluster-scoped, no
// status).
package attestationpolicy

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage/names"

	"rekey.io/rekey/pkg/apis/attestation"
	"rekey.io/rekey/pkg/apis/attestation/validation"
	"rekey.io/rekey/pkg/registry"
	"rekey.io/rekey/pkg/registry/printers"
)

type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

func (strategy) NamespaceScoped() bool { return false }
func (strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	obj.(*attestation.AttestationPolicy).Generation = 1
}
func (strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	p, prev := obj.(*attestation.AttestationPolicy), old.(*attestation.AttestationPolicy)
	p.Generation = prev.Generation
	if !equality.Semantic.DeepEqual(p.Spec, prev.Spec) {
		p.Generation++
	}
}
func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateAttestationPolicy(obj.(*attestation.AttestationPolicy))
}
func (strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateAttestationPolicyUpdate(obj.(*attestation.AttestationPolicy), old.(*attestation.AttestationPolicy))
}
func (strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }
func (strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}
func (strategy) Canonicalize(runtime.Object)                   {}
func (strategy) AllowCreateOnUpdate(context.Context) bool      { return false }
func (strategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// table prints what `kubectl get rattpolicy` shows.
var table = printers.Table[*attestation.AttestationPolicy]{
	Columns: []metav1.TableColumnDefinition{
		{Name: "Signers", Type: "string", Description: "Signers whose Attestation approval the policy gates."},
		{Name: "PCRs", Type: "string", Description: "The PCR selection a quote must cover."},
		{Name: "Mode", Type: "string", Description: "Fixed PCR values or trust on first use."},
		{Name: "EK Trust", Type: "string", Description: "Certificate roots and/or allow-listed EK keys."},
		{Name: "Age", Type: "string", Description: "Time since creation."},
	},
	Row: func(p *attestation.AttestationPolicy) []interface{} {
		pcrs := make([]string, len(p.Spec.PCRPolicy.Selection))
		for i, s := range p.Spec.PCRPolicy.Selection {
			pcrs[i] = fmt.Sprint(s)
		}
		var trust []string
		if p.Spec.EKRootCertificates != "" {
			trust = append(trust, "roots")
		}
		if n := len(p.Spec.AllowedEKPublicKeyHashes); n > 0 {
			trust = append(trust, fmt.Sprintf("%d keys", n))
		}
		return []interface{}{strings.Join(p.Spec.SignerNames, ","), strings.Join(pcrs, ","), string(p.Spec.PCRPolicy.Mode), strings.Join(trust, "+"), printers.Age(p.CreationTimestamp)}
	},
}

// NewStorage returns the storage of AttestationPolicies.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*registry.REST, error) {
	s := strategy{ObjectTyper: scheme, NameGenerator: names.SimpleNameGenerator}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &attestation.AttestationPolicy{} },
		NewListFunc:               func() runtime.Object { return &attestation.AttestationPolicyList{} },
		DefaultQualifiedResource:  attestation.Resource("attestationpolicies"),
		SingularQualifiedResource: attestation.Resource("attestationpolicy"),
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		TableConvertor:            table,
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter}); err != nil {
		return nil, err
	}
	return registry.NewREST(store, "rattpolicy"), nil
}
