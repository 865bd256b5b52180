package certificatesigningrequest

import (
	"bytes"
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/utils/clock"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apis/message"
	"rekey.io/rekey/pkg/issuer"
)

// Issuer decides, inside the write that approves or creates a request, the
// outcome that write stores with it (package issuer).
type Issuer interface {
	// AtApproval is asked for an approval write that admission allowed
	// and that stores the request approved, without a certificate and not
	// failed. An error fails the write.
	AtApproval(ctx context.Context, csr *certificates.CertificateSigningRequest, approvedAt time.Time) (issuer.Outcome, error)
	// AtCreate is asked for a create that admission allowed.
	AtCreate(ctx context.Context, csr *certificates.CertificateSigningRequest) (issuer.Outcome, error)
}

// Managers that own what an outcome adds: the same managers, and the same
// subresources, as when the approver and signer controllers write it, so
// that server-side apply ownership does not depend on the path that issued.
const (
	managerSigner   = "rekey-signer"
	managerApprover = "rekey-approver"
)

// write is one create or approval request on its way to storage. The
// validation wrapper marks the current attempt admitted: the storage
// decorator decides only after everything (strategy validation and every
// validating admission plugin) has allowed the write, on the very object
// that is about to be stored. An outcome decided in one attempt is reused
// by the next (a conflict retry), so a request is signed at most once per
// write.
type write struct {
	admitted bool

	decidedFor string // UID the outcome is for
	outcome    *issuer.Outcome
}

type writeKey struct{}

func withWrite(ctx context.Context) (context.Context, *write) {
	w := &write{}
	return context.WithValue(ctx, writeKey{}, w), w
}

func writeFrom(ctx context.Context) *write {
	w, _ := ctx.Value(writeKey{}).(*write)
	return w
}

func (w *write) afterCreateValidation(validate rest.ValidateObjectFunc) rest.ValidateObjectFunc {
	return func(ctx context.Context, obj runtime.Object) error {
		if validate != nil {
			if err := validate(ctx, obj); err != nil {
				return err
			}
		}
		w.admitted = true
		return nil
	}
}

func (w *write) afterUpdateValidation(validate rest.ValidateObjectUpdateFunc) rest.ValidateObjectUpdateFunc {
	return func(ctx context.Context, obj, old runtime.Object) error {
		if validate != nil {
			if err := validate(ctx, obj, old); err != nil {
				return err
			}
		}
		w.admitted = true
		return nil
	}
}

// decide returns the outcome for the request, deciding it only once per
// write and request UID.
func (w *write) decide(uid string, decide func() (issuer.Outcome, error)) (issuer.Outcome, error) {
	if w.outcome != nil && w.decidedFor == uid {
		return *w.outcome, nil
	}
	out, err := decide()
	if err != nil {
		return issuer.Outcome{}, err
	}
	w.decidedFor, w.outcome = uid, &out
	return out, nil
}

// issuingStorage is the storage under the request store: for a write
// marked by the REST in its context, it asks the issuer just before the
// object is written, after admission, and stores the outcome in the same
// write. Every other call passes through.
type issuingStorage struct {
	storage.Interface
	issuer Issuer
	clock  clock.PassiveClock
}

func (s *issuingStorage) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	if w := writeFrom(ctx); w != nil && w.admitted {
		w.admitted = false
		// A create under a name that is taken fails after this point; not
		// deciding it keeps a requester from having rekey sign (and
		// record) again and again by repeating one create.
		if csr, ok := obj.(*certificates.CertificateSigningRequest); ok && isPending(csr) {
			exists, err := s.exists(ctx, key)
			switch {
			case !exists && err == nil:
				outcome, err := w.decide(string(csr.UID), func() (issuer.Outcome, error) { return s.issuer.AtCreate(ctx, csr) })
				if err != nil {
					return err
				}
				applyOutcome(csr, outcome, metav1.NewTime(s.clock.Now()))
			case issuer.HasNodeClientGrant(ctx):
				// A create through selfnodeclient or nodeclient stores
				// only what was decided: its permission is not the main
				// resource's "create".
				if err != nil {
					return apierrors.NewServiceUnavailable(fmt.Sprintf("checking whether %s exists: %v", csr.Name, err))
				}
				return apierrors.NewAlreadyExists(certificates.Resource("certificatesigningrequests"), csr.Name)
			}
		}
	}
	return s.Interface.Create(ctx, key, obj, out, ttl)
}

// exists says whether an object is stored under key, as the watch cache
// knows it (a create racing with this one may still win: then one
// certificate is signed and not stored, which the records allow).
func (s *issuingStorage) exists(ctx context.Context, key string) (bool, error) {
	existing := &certificates.CertificateSigningRequest{}
	if err := s.Interface.Get(ctx, key, storage.GetOptions{ResourceVersion: "0", IgnoreNotFound: true}, existing); err != nil {
		return true, err
	}
	return existing.Name != "", nil
}

func (s *issuingStorage) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error {
	w := writeFrom(ctx)
	if w == nil {
		return s.Interface.GuaranteedUpdate(ctx, key, destination, ignoreNotFound, preconditions, tryUpdate, cachedExistingObject)
	}
	decided := func(existing runtime.Object, res storage.ResponseMeta) (runtime.Object, *uint64, error) {
		w.admitted = false
		obj, ttl, err := tryUpdate(existing, res)
		if err != nil || !w.admitted {
			return obj, ttl, err
		}
		csr, ok := obj.(*certificates.CertificateSigningRequest)
		old, oldOK := existing.(*certificates.CertificateSigningRequest)
		if !ok || !oldOK || len(old.Status.Certificate) > 0 || !needsCertificate(csr) {
			return obj, ttl, nil
		}
		approvedAt := time.Time{}
		if c := certificates.GetCondition(csr, certificates.CertificateApproved); c != nil {
			approvedAt = c.LastUpdateTime.Time
		}
		outcome, err := w.decide(string(csr.UID), func() (issuer.Outcome, error) { return s.issuer.AtApproval(ctx, csr, approvedAt) })
		if err != nil {
			return nil, nil, err
		}
		applyOutcome(csr, outcome, metav1.NewTime(s.clock.Now()))
		return obj, ttl, nil
	}
	return s.Interface.GuaranteedUpdate(ctx, key, destination, ignoreNotFound, preconditions, decided, cachedExistingObject)
}

func isPending(csr *certificates.CertificateSigningRequest) bool {
	return len(csr.Status.Conditions) == 0 && len(csr.Status.Certificate) == 0
}

// needsCertificate: approved, not denied, not failed, no certificate.
func needsCertificate(csr *certificates.CertificateSigningRequest) bool {
	return certificates.IsApproved(csr) && !certificates.IsDenied(csr) && !certificates.IsFailed(csr) &&
		len(csr.Status.Certificate) == 0
}

// applyOutcome writes an outcome into the object about to be stored, with
// the conditions stamped now and ownership recorded in managedFields. The
// write happens after validation, so messages are capped here to what
// validation accepts: a longer one would refuse every later write.
func applyOutcome(csr *certificates.CertificateSigningRequest, out issuer.Outcome, now metav1.Time) {
	addCondition := func(t certificates.RequestConditionType, d *issuer.Decision) {
		csr.Status.Conditions = append(csr.Status.Conditions, certificates.CertificateSigningRequestCondition{
			Type: t, Status: metav1.ConditionTrue, Reason: d.Reason, Message: message.Cap(d.Message), LastUpdateTime: now, LastTransitionTime: now,
		})
	}
	if a := out.Attestation; a != nil && certificates.GetCondition(csr, certificates.CertificateAttested) == nil {
		status := metav1.ConditionFalse
		if a.Passed {
			status = metav1.ConditionTrue
		}
		csr.Status.Conditions = append(csr.Status.Conditions, certificates.CertificateSigningRequestCondition{
			Type: certificates.CertificateAttested, Status: status, Reason: a.Reason, Message: message.Cap(a.Message), LastUpdateTime: now, LastTransitionTime: now,
		})
		addOwnership(csr, managerApprover, "approval", now, conditionPaths(certificates.CertificateAttested)...)
	}
	if out.Approval != nil && certificates.GetCondition(csr, certificates.CertificateApproved) == nil {
		addCondition(certificates.CertificateApproved, out.Approval)
		addOwnership(csr, managerApprover, "approval", now, conditionPaths(certificates.CertificateApproved)...)
	}
	switch {
	case len(out.Certificate) > 0:
		csr.Status.Certificate = out.Certificate
		// The Issued condition comes with the certificate, in this write,
		// as the /status strategy adds it when a controller or an external
		// signer sets one.
		if certificates.GetCondition(csr, certificates.CertificateIssued) == nil {
			csr.Status.Conditions = append(csr.Status.Conditions, issuedCondition(out.Certificate, now))
		}
		addOwnership(csr, managerSigner, "status", now,
			append([]fieldpath.Path{fieldpath.MakePathOrDie("status", "certificate")}, conditionPaths(certificates.CertificateIssued)...)...)
	case out.Failure != nil:
		addCondition(certificates.CertificateFailed, out.Failure)
		addOwnership(csr, managerSigner, "status", now, conditionPaths(certificates.CertificateFailed)...)
	}
}

// conditionPaths are the fields of one condition of status.conditions, a
// list keyed by type.
func conditionPaths(t certificates.RequestConditionType) []fieldpath.Path {
	key := fieldpath.KeyByFields("type", string(t))
	paths := []fieldpath.Path{fieldpath.MakePathOrDie("status", "conditions", key)}
	for _, f := range []string{"type", "status", "reason", "message", "lastUpdateTime", "lastTransitionTime"} {
		paths = append(paths, fieldpath.MakePathOrDie("status", "conditions", key, f))
	}
	return paths
}

// addOwnership records that manager (an Update through subresource) owns
// paths, merged into the manager's existing entry if it has one.
func addOwnership(obj metav1.Object, manager, subresource string, now metav1.Time, paths ...fieldpath.Path) {
	owned := fieldpath.NewSet(paths...)
	var entries []metav1.ManagedFieldsEntry
	for _, e := range obj.GetManagedFields() {
		if e.Manager == manager && e.Operation == metav1.ManagedFieldsOperationUpdate && e.Subresource == subresource &&
			e.APIVersion == apiVersion && e.FieldsType == "FieldsV1" && e.FieldsV1 != nil {
			previous := &fieldpath.Set{}
			if err := previous.FromJSON(bytes.NewReader(e.FieldsV1.GetRawBytes())); err == nil {
				owned = owned.Union(previous)
				continue
			}
		}
		entries = append(entries, e)
	}
	raw, err := owned.ToJSON()
	if err != nil {
		return
	}
	obj.SetManagedFields(append(entries, metav1.ManagedFieldsEntry{
		Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: apiVersion, Time: &now,
		FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(string(raw)), Subresource: subresource,
	}))
}
