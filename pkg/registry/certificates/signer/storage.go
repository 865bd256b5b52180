// Package signer stores Signers.
package signer

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/registry/specstatus"
)

var kind = specstatus.Kind[*certificates.Signer]{
	APIVersion:  "certificates.rekey.io/v1alpha1",
	Spec:        func(s *certificates.Signer) any { return &s.Spec },
	Status:      func(s *certificates.Signer) any { return &s.Status },
	ResetStatus: func(s *certificates.Signer) { s.Status = certificates.SignerStatus{} },
	CopyStatus:  func(dst, src *certificates.Signer) { dst.Status = src.Status },
	CopySpec:    func(dst, src *certificates.Signer) { dst.Spec = src.Spec },
	Validate:    validation.ValidateSigner,
	ValidateUpdate: func(n, o *certificates.Signer) field.ErrorList {
		return validation.ValidateSignerUpdate(n, o)
	},
	ValidateStatusUpdate:    validation.ValidateSignerStatusUpdate,
	StatusByControllersOnly: true,
}

var table = specstatus.Table[*certificates.Signer]{
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
			specstatus.ConditionStatus(s.Status.Conditions, certificates.SignerReady), specstatus.Age(s.CreationTimestamp)}
	},
}

// NewStorage returns the main and /status storage.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*specstatus.REST, *specstatus.SubresourceREST, error) {
	return specstatus.NewStorage(scheme, optsGetter, specstatus.Resource[*certificates.Signer]{
		New:        func() runtime.Object { return &certificates.Signer{} },
		NewList:    func() runtime.Object { return &certificates.SignerList{} },
		Plural:     certificates.Resource("signers"),
		Singular:   certificates.Resource("signer"),
		ShortNames: []string{"rsigner"},
		Table:      table,
		Kind:       kind,
	})
}
