package revocation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/registry"
	"rekey.io/rekey/pkg/registry/printers"
	"rekey.io/rekey/pkg/serveridentity"
)

// Records finds a certificate rekey issued (issuance.Recorder).
type Records interface {
	BySHA256(ctx context.Context, sha256Hex string) (issuance.Record, bool, error)
	BySerial(ctx context.Context, caName, serialHex string) (issuance.Record, bool, error)
}

var _ Records = &issuance.Recorder{}

// table prints what `kubectl get revocations` shows (-o wide adds the
// serial, the CA, the request and who revoked it).
var table = printers.Table[*certificates.Revocation]{
	Columns: []metav1.TableColumnDefinition{
		{Name: "Signer", Type: "string", Description: "The signer that issued the certificate."},
		{Name: "Subject", Type: "string", Description: "The certificate's subject."},
		{Name: "Reason", Type: "string", Description: "The RFC 5280 reason."},
		{Name: "Revoked", Type: "string", Description: "Time since the revocation."},
		{Name: "Not After", Type: "string", Format: "date-time", Description: "When the certificate expires."},
		{Name: "Serial", Type: "string", Priority: 1, Description: "The certificate's serial number in hex."},
		{Name: "CA", Type: "string", Priority: 1, Description: "The CertificateAuthority that signed it."},
		{Name: "Request", Type: "string", Priority: 1, Description: "The request it was issued for."},
		{Name: "By", Type: "string", Priority: 1, Description: "The user that revoked it."},
	},
	Row: func(r *certificates.Revocation) []interface{} {
		return []interface{}{r.Status.SignerName, r.Status.Subject, string(r.Spec.Reason), printers.Age(r.Status.RevocationTime),
			r.Status.NotAfter.UTC().Format(time.RFC3339), printers.SerialHexString(r.Status.SerialNumber), r.Status.CAName, r.Status.Request, r.Status.RevokedBy}
	},
}

// REST serves Revocations: create resolves the certificate, update only
// touches metadata, delete is the controllers' alone.
type REST struct {
	*registry.REST
	store   *genericregistry.Store
	records Records
	clock   clock.PassiveClock
}

// NewStorage returns the Revocation storage; records finds the certificates
// rekey issued, clk stamps revocationTime.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, records Records, clk clock.PassiveClock) (*REST, error) {
	if records == nil {
		return nil, errors.New("revocations need the issuance records")
	}
	s := NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &certificates.Revocation{} },
		NewListFunc:               func() runtime.Object { return &certificates.RevocationList{} },
		DefaultQualifiedResource:  certificates.Resource("revocations"),
		SingularQualifiedResource: certificates.Resource("revocation"),
		PredicateFunc:             Matcher,
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		ResetFieldsStrategy:       s,
		TableConvertor:            table,
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, err
	}
	return &REST{REST: registry.NewREST(store, "rrev"), store: store, records: records, clock: clk}, nil
}

var (
	_ rest.Creater           = &REST{}
	_ rest.Updater           = &REST{}
	_ rest.GracefulDeleter   = &REST{}
	_ rest.CollectionDeleter = &REST{}
	_ rest.StandardStorage   = &REST{}
)

// errNotUndone is why a client may not delete a revocation.
const errNotUndone = "a revocation is not undone: only rekey deletes it, once its certificate has expired or the CA key that signed it is destroyed"

// Create finds the certificate spec names among those rekey issued, names
// the object by its SHA-256 and fills status, then creates it through the
// generic store (whose validating admission authorizes the signer found).
// A certificate revoked before is AlreadyExists: one object per
// certificate, however many ask.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	rev, ok := obj.(*certificates.Revocation)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a Revocation: %T", obj))
	}
	if err := r.resolve(ctx, rev); err != nil {
		return nil, err
	}
	return r.store.Create(ctx, rev, createValidation, options)
}

// resolve names rev and fills its status from the record of the
// certificate its spec names.
func (r *REST) resolve(ctx context.Context, rev *certificates.Revocation) error {
	gk := certificates.Kind("Revocation")
	if errs := validation.ValidateRevocationSpec(&rev.Spec, field.NewPath("spec")); len(errs) > 0 {
		return apierrors.NewInvalid(gk, rev.Name, errs)
	}
	rev.Spec.CertificateSHA256 = strings.ToLower(rev.Spec.CertificateSHA256)
	rec, err := r.find(ctx, &rev.Spec)
	if err != nil {
		return err
	}
	if rec.SHA256 == "" {
		// A record written before records had SHA-256 (found by serial):
		// the object could not be named by it.
		return apierrors.NewInvalid(gk, rev.Name, field.ErrorList{field.Invalid(field.NewPath("spec", "serialNumber"), rev.Spec.SerialNumber,
			"the record of this certificate predates the SHA-256 in rekey's records, so it cannot be revoked (the server names a revocation by it)")})
	}
	if rev.Name != "" && rev.Name != rec.SHA256 {
		return apierrors.NewInvalid(gk, rev.Name, field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), rev.Name,
			"must be empty (the server names a revocation) or the SHA-256 of the certificate spec names, in lowercase hex")})
	}
	rev.Name, rev.GenerateName = rec.SHA256, ""
	user := ""
	if u, ok := genericapirequest.UserFrom(ctx); ok && u != nil {
		user = u.GetName()
	}
	// Whatever the client sent in status is replaced: it is what the
	// server found and when, and who asked.
	rev.Status = certificates.RevocationStatus{
		CertificateSHA256: rec.SHA256,
		SerialNumber:      rec.Serial,
		SignerName:        rec.SignerName,
		CAName:            rec.CAName,
		CAKeyID:           rec.CAKeyID,
		Subject:           rec.Subject,
		Requester:         rec.Requester,
		Request:           rec.CSRName,
		RequestUID:        rec.CSRUID,
		NotAfter:          metav1.NewTime(rec.NotAfter),
		RevocationTime:    metav1.NewTime(r.clock.Now().Truncate(time.Second)),
		RevokedBy:         user,
	}
	return nil
}

// find looks the certificate up; a certificate rekey has no record of is
// NotFound, saying no more than that.
func (r *REST) find(ctx context.Context, spec *certificates.RevocationSpec) (issuance.Record, error) {
	var (
		rec   issuance.Record
		found bool
		err   error
		what  string
	)
	if spec.CertificateSHA256 != "" {
		what = "SHA-256 " + spec.CertificateSHA256
		rec, found, err = r.records.BySHA256(ctx, spec.CertificateSHA256)
	} else {
		what = "serial number " + spec.SerialNumber
		if spec.CAName != "" {
			what += " from CA " + spec.CAName
		}
		rec, found, err = r.records.BySerial(ctx, spec.CAName, spec.SerialNumber)
	}
	switch {
	case errors.Is(err, issuance.ErrAmbiguous):
		return rec, apierrors.NewInvalid(certificates.Kind("Revocation"), "", field.ErrorList{field.Invalid(field.NewPath("spec", "serialNumber"), spec.SerialNumber,
			"more than one CertificateAuthority issued a certificate with this serial number; set spec.caName or revoke by spec.certificateSHA256")})
	case err != nil:
		return rec, apierrors.NewInternalError(fmt.Errorf("looking up the certificate to revoke: %w", err))
	case !found:
		return rec, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: 404, Reason: metav1.StatusReasonNotFound,
			Details: &metav1.StatusDetails{Group: certificates.GroupName, Kind: "revocations"},
			Message: fmt.Sprintf("no certificate rekey issued has %s (rekey revokes the certificates it issued until they expire or their CA key is destroyed)", what),
		}}
	}
	return rec, nil
}

// Update changes metadata only: it never creates (server-side apply of a
// Revocation that does not exist would otherwise create it past Create's
// lookup) and the strategy keeps status and refuses a spec change.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, _ bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// Delete is rekey's controllers' alone: a revocation is not undone.
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	if !serveridentity.FromContext(ctx) {
		return nil, false, apierrors.NewForbidden(certificates.Resource("revocations"), name, errors.New(errNotUndone))
	}
	return r.store.Delete(ctx, name, deleteValidation, options)
}

// DeleteCollection is refused to everyone but rekey's controllers, as Delete.
func (r *REST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	if !serveridentity.FromContext(ctx) {
		return nil, apierrors.NewForbidden(certificates.Resource("revocations"), "", errors.New(errNotUndone))
	}
	return r.store.DeleteCollection(ctx, deleteValidation, options, listOptions)
}
