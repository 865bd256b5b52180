// Package revocation stores Revocations. A client names a certificate in
// spec; the storage's Create finds it among the certificates rekey issued
// (the issuance records), names the object by the certificate's SHA-256
// and fills status before the generic create, so that the validating
// admission plugin (SignerRevocation), which runs inside that create,
// authorizes against the signer the server found, never one the client
// claimed. A revocation is then neither changed (metadata labels and
// annotations aside) nor deleted by clients: only rekey's controllers
// delete one, once its certificate has expired or its CA key is gone.
package revocation

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apis/certificates/validation"
)

const apiVersion = "certificates.rekey.io/v1alpha1"

type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NewStrategy returns the strategy of Revocations.
func NewStrategy(typer runtime.ObjectTyper) strategy {
	return strategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator}
}

func (strategy) NamespaceScoped() bool { return false }

// GetResetFields: status is the server's; no manager owns it.
func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// PrepareForCreate leaves status as the storage's Create filled it from
// the issuance record (a client's status never gets this far: Create
// replaced it).
func (strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	r := obj.(*certificates.Revocation)
	r.Spec.CertificateSHA256 = strings.ToLower(r.Spec.CertificateSHA256)
	r.Generation = 1
}

// PrepareForUpdate keeps status: only metadata may change, and a spec
// change is refused by validation.
func (strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	r, prev := obj.(*certificates.Revocation), old.(*certificates.Revocation)
	r.Status = prev.Status
	r.Generation = prev.Generation
}

// Validate checks the client's spec and name, and that status was resolved
// by the server: a Revocation without the signer found in the records
// would be authorized against nothing, so it is refused here whatever
// path it came by.
func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	r := obj.(*certificates.Revocation)
	allErrs := validation.ValidateRevocation(r)
	status := field.NewPath("status")
	if r.Status.SignerName == "" {
		allErrs = append(allErrs, field.Required(status.Child("signerName"), "set by the server from the record of the certificate it issued"))
	}
	if r.Status.CertificateSHA256 == "" || r.Status.CertificateSHA256 != r.Name {
		allErrs = append(allErrs, field.Invalid(status.Child("certificateSHA256"), r.Status.CertificateSHA256, "set by the server to the certificate's SHA-256, the object's name"))
	}
	return append(allErrs, onlyLabelsAndAnnotations(r, &certificates.Revocation{})...)
}

func (strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	r, prev := obj.(*certificates.Revocation), old.(*certificates.Revocation)
	return append(validation.ValidateRevocationUpdate(r, prev), onlyLabelsAndAnnotations(r, prev)...)
}

// onlyLabelsAndAnnotations refuses finalizers and owner references other
// than old's: a finalizer would keep a revocation rekey deletes (expired,
// or its key destroyed) in the API for good, and an owner reference would
// hand its deletion to another controller; only rekey's may delete it.
func onlyLabelsAndAnnotations(r, old *certificates.Revocation) field.ErrorList {
	var allErrs field.ErrorList
	if !apiequality.Semantic.DeepEqual(r.Finalizers, old.Finalizers) {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("metadata", "finalizers"), "a revocation takes no finalizers: only its labels and annotations may be set"))
	}
	if !apiequality.Semantic.DeepEqual(r.OwnerReferences, old.OwnerReferences) {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("metadata", "ownerReferences"), "a revocation has no owner: only its labels and annotations may be set"))
	}
	return allErrs
}

func (strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }
func (strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}
func (strategy) Canonicalize(runtime.Object)                   {}
func (strategy) AllowCreateOnUpdate(context.Context) bool      { return false }
func (strategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// GetAttrs returns the labels and the selectable fields (metadata only).
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	r, ok := obj.(*certificates.Revocation)
	if !ok {
		return nil, nil, fmt.Errorf("not a Revocation: %s", reflect.TypeOf(obj))
	}
	return labels.Set(r.Labels), generic.ObjectMetaFieldsSet(&r.ObjectMeta, false), nil
}

// Matcher selects revocations by label and metadata field.
func Matcher(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: GetAttrs}
}
