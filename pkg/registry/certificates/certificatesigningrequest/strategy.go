// Package certificatesigningrequest stores CertificateSigningRequests: one
// base strategy for the main resource and thin variants for /status and
// /approval, so that approving and signing can be authorized separately.
package certificatesigningrequest

import (
	"context"
	"fmt"
	"reflect"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/utils/clock"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"rekey.io/rekey/pkg/apis/certificates"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/registry"
	"rekey.io/rekey/pkg/serveridentity"
)

const apiVersion = "certificates.rekey.io/v1alpha1"

// csrStrategy implements create and update of the main resource.
type csrStrategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	clock clock.PassiveClock
}

// NewStrategy returns the strategy of the main resource. The clock stamps
// condition times; tests pass a fake one.
func NewStrategy(typer runtime.ObjectTyper, clk clock.PassiveClock) csrStrategy {
	return csrStrategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator, clock: clk}
}

func (csrStrategy) NamespaceScoped() bool { return false }

// GetResetFields says which fields server-side apply must not let a manager
// own through the main resource: all of status.
func (csrStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

// PrepareForCreate stamps the requester's identity from the authenticated
// user in the request context, whatever the body says, and clears status.
func (s csrStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	csr := obj.(*certificates.CertificateSigningRequest)
	csr.Spec.Username, csr.Spec.UID, csr.Spec.Groups, csr.Spec.Extra = "", "", nil, nil
	if user, ok := genericapirequest.UserFrom(ctx); ok {
		csr.Spec.Username = user.GetName()
		csr.Spec.UID = user.GetUID()
		if groups := user.GetGroups(); len(groups) > 0 {
			csr.Spec.Groups = append([]string(nil), groups...)
		}
		if extra := user.GetExtra(); len(extra) > 0 {
			csr.Spec.Extra = make(map[string]certificates.ExtraValue, len(extra))
			for k, v := range extra {
				csr.Spec.Extra[k] = append(certificates.ExtraValue(nil), v...)
			}
		}
	}
	csr.Status = certificates.CertificateSigningRequestStatus{}
}

// PrepareForUpdate keeps spec and status: the main resource only changes metadata.
func (csrStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newCSR, oldCSR := obj.(*certificates.CertificateSigningRequest), old.(*certificates.CertificateSigningRequest)
	newCSR.Spec = oldCSR.Spec
	newCSR.Status = oldCSR.Status
}

func (csrStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateCertificateSigningRequestCreate(obj.(*certificates.CertificateSigningRequest))
}

func (csrStrategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string {
	csr := obj.(*certificates.CertificateSigningRequest)
	if csr.Spec.ExpirationSeconds != nil && *csr.Spec.ExpirationSeconds > 0 && *csr.Spec.ExpirationSeconds < 3600 {
		return []string{fmt.Sprintf("spec.expirationSeconds: %d seconds is short; signers may round it up or reject it", *csr.Spec.ExpirationSeconds)}
	}
	return nil
}

func (csrStrategy) Canonicalize(obj runtime.Object) {}

func (csrStrategy) AllowCreateOnUpdate(context.Context) bool { return false }

func (csrStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateCertificateSigningRequestUpdate(obj.(*certificates.CertificateSigningRequest), old.(*certificates.CertificateSigningRequest))
}

func (csrStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

func (csrStrategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// statusStrategy writes status.certificate and non-approval conditions.
type statusStrategy struct{ csrStrategy }

// NewStatusStrategy returns the strategy of /status.
func NewStatusStrategy(base csrStrategy) statusStrategy { return statusStrategy{base} }

func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

// PrepareForUpdate keeps the spec, keeps existing Approved/Denied conditions
// exactly as they were (adding one here is rejected by validation), and
// stamps condition times.
func (s statusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newCSR, oldCSR := obj.(*certificates.CertificateSigningRequest), old.(*certificates.CertificateSigningRequest)
	newCSR.Spec = oldCSR.Spec
	registry.KeepMetadata(newCSR, oldCSR)
	preserveCondition(newCSR, oldCSR, certificates.CertificateApproved)
	preserveCondition(newCSR, oldCSR, certificates.CertificateDenied)
	keepRevoked(ctx, newCSR, oldCSR)
	now := s.clock.Now()
	keepIssued(newCSR, oldCSR, now)
	stampConditionTimes(newCSR, oldCSR, now)
}

func (statusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	newCSR, oldCSR := obj.(*certificates.CertificateSigningRequest), old.(*certificates.CertificateSigningRequest)
	errs := append(validation.ValidateCertificateSigningRequestStatusUpdate(newCSR, oldCSR), forbidRevoked(ctx, newCSR, oldCSR)...)
	return append(errs, forbidIssued(newCSR)...)
}

func (statusStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

// approvalStrategy adds Approved or Denied (and Failed).
type approvalStrategy struct{ csrStrategy }

// NewApprovalStrategy returns the strategy of /approval.
func NewApprovalStrategy(base csrStrategy) approvalStrategy { return approvalStrategy{base} }

func (approvalStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		apiVersion: fieldpath.NewSet(
			fieldpath.MakePathOrDie("spec"),
			fieldpath.MakePathOrDie("status", "certificate"),
		),
	}
}

// PrepareForUpdate keeps everything but the conditions: spec, certificate
// and metadata (but managed fields) as they were, so that the right to
// approve is not also a right to relabel, annotate or add finalizers, and
// an approval that races with the signer (or repeats) keeps the stored
// certificate instead of failing on it.
func (s approvalStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newCSR, oldCSR := obj.(*certificates.CertificateSigningRequest), old.(*certificates.CertificateSigningRequest)
	newCSR.Spec = oldCSR.Spec
	newCSR.Status.Certificate = oldCSR.Status.Certificate
	registry.KeepMetadata(newCSR, oldCSR)
	keepRevoked(ctx, newCSR, oldCSR)
	now := s.clock.Now()
	keepIssued(newCSR, oldCSR, now)
	stampConditionTimes(newCSR, oldCSR, now)
}

func (approvalStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	newCSR, oldCSR := obj.(*certificates.CertificateSigningRequest), old.(*certificates.CertificateSigningRequest)
	errs := append(validation.ValidateCertificateSigningRequestApprovalUpdate(newCSR, oldCSR), forbidRevoked(ctx, newCSR, oldCSR)...)
	return append(errs, forbidIssued(newCSR)...)
}

// keepRevoked puts the stored Revoked condition back as it was, whatever
// a client's /status or /approval write sent: the condition says a
// Revocation names the certificate, which is rekey's controllers' to
// record (pkg/controller/revocation). A client writing from a copy read
// before the revocation (an unconditional update) does not drop it, and
// none can edit it.
func keepRevoked(ctx context.Context, newCSR, oldCSR *certificates.CertificateSigningRequest) {
	if serveridentity.FromContext(ctx) {
		return
	}
	var kept []certificates.CertificateSigningRequestCondition
	for _, c := range newCSR.Status.Conditions {
		if c.Type != certificates.CertificateRevoked {
			kept = append(kept, c)
		}
	}
	if old := certificates.GetCondition(oldCSR, certificates.CertificateRevoked); old != nil {
		kept = append(kept, *old)
	} else if added := certificates.GetCondition(newCSR, certificates.CertificateRevoked); added != nil {
		// Left for forbidRevoked to refuse, as a client adding Attested
		// is refused: silently dropping it would tell the client its
		// write succeeded.
		kept = append(kept, *added)
	}
	newCSR.Status.Conditions = kept
}

// forbidRevoked refuses a Revoked condition a client adds (keepRevoked has
// put back any the request had).
func forbidRevoked(ctx context.Context, newCSR, oldCSR *certificates.CertificateSigningRequest) field.ErrorList {
	if serveridentity.FromContext(ctx) || certificates.GetCondition(oldCSR, certificates.CertificateRevoked) != nil ||
		certificates.GetCondition(newCSR, certificates.CertificateRevoked) == nil {
		return nil
	}
	return field.ErrorList{field.Forbidden(field.NewPath("status", "conditions"),
		fmt.Sprintf("a condition of type %q is recorded by rekey when a Revocation names the certificate; create a Revocation instead", certificates.CertificateRevoked))}
}

func (approvalStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

// preserveCondition puts back the old instance of a condition type when both
// old and new have it, so that /status cannot rewrite an approval decision.
func preserveCondition(newCSR, oldCSR *certificates.CertificateSigningRequest, t certificates.RequestConditionType) {
	var oldCond *certificates.CertificateSigningRequestCondition
	for i := range oldCSR.Status.Conditions {
		if oldCSR.Status.Conditions[i].Type == t {
			oldCond = &oldCSR.Status.Conditions[i]
			break
		}
	}
	if oldCond == nil {
		return
	}
	for i := range newCSR.Status.Conditions {
		if newCSR.Status.Conditions[i].Type == t {
			newCSR.Status.Conditions[i] = *oldCond
		}
	}
}

// stampConditionTimes sets lastUpdateTime and lastTransitionTime from the
// server's clock, whatever the writer sent: the cleaner deletes requests by
// these times, so a writer who could date a condition in 1970 could have a
// request deleted that it may not delete. A condition unchanged from the
// stored object keeps its stored times; a new or changed one is updated
// now, and has transitioned now unless its status is the stored one.
func stampConditionTimes(newCSR, oldCSR *certificates.CertificateSigningRequest, now time.Time) {
	stamp := metav1.NewTime(now)
	for i := range newCSR.Status.Conditions {
		c := &newCSR.Status.Conditions[i]
		old := certificates.GetCondition(oldCSR, c.Type)
		switch {
		case old != nil && old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message:
			c.LastUpdateTime, c.LastTransitionTime = old.LastUpdateTime, old.LastTransitionTime
		case old != nil && old.Status == c.Status:
			c.LastUpdateTime, c.LastTransitionTime = stamp, old.LastTransitionTime
		default:
			c.LastUpdateTime, c.LastTransitionTime = stamp, stamp
		}
	}
}

// GetAttrs returns the labels and selectable fields of a request.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	csr, ok := obj.(*certificates.CertificateSigningRequest)
	if !ok {
		return nil, nil, fmt.Errorf("not a CertificateSigningRequest: %s", reflect.TypeOf(obj))
	}
	return labels.Set(csr.Labels), SelectableFields(csr), nil
}

// SelectableFields are the fields a list or watch may select on:
// spec.signerName, and state, computed from the status.
func SelectableFields(csr *certificates.CertificateSigningRequest) fields.Set {
	return generic.AddObjectMetaFieldsSet(fields.Set{
		certv1alpha1.SignerNameField: csr.Spec.SignerName,
		certv1alpha1.StateField:      State(csr),
	}, &csr.ObjectMeta, false)
}

// State is where a request is in its life: Denied or Failed when it ended
// so, Issued once it has a certificate, Approved while it waits for one,
// Pending before a decision.
func State(csr *certificates.CertificateSigningRequest) string {
	switch {
	case certificates.GetCondition(csr, certificates.CertificateDenied) != nil:
		return certv1alpha1.StateDenied
	case certificates.GetCondition(csr, certificates.CertificateFailed) != nil:
		return certv1alpha1.StateFailed
	case len(csr.Status.Certificate) > 0:
		return certv1alpha1.StateIssued
	case certificates.GetCondition(csr, certificates.CertificateApproved) != nil:
		return certv1alpha1.StateApproved
	default:
		return certv1alpha1.StatePending
	}
}

// Matcher selects requests by label and field.
func Matcher(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: GetAttrs}
}
