package nodeattestation

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/apis/attestation"
	"rekey.io/rekey/pkg/apis/message"
	"rekey.io/rekey/pkg/attest"
)

// ConditionReady is a NodeAttestation's one condition: True once a
// certificate request answered its challenge, False with the reason
// otherwise.
const ConditionReady = "Ready"

// Challenger checks the EK and AK of a NodeAttestation's spec under its
// policy and makes a credential-activation challenge, keeping the secret
// on the server (package nodeattest). A refusal is an *attest.Refusal; the
// EK fingerprint is returned whenever the EK could be read.
type Challenger interface {
	Challenge(ctx context.Context, node string, spec *attestation.NodeAttestationSpec) (*attestation.AttestationChallenge, string, error)
}

// StatusWriter writes NodeAttestation status for rekey itself: the
// challenge subresource and the Attestation approval at a request's
// create, whose caller is the node, not rekey's controllers. It goes
// through the store (validation, resourceVersion compare-and-swap), not
// through /status, which refuses everyone but rekey's own identity.
type StatusWriter struct {
	store *genericregistry.Store
}

// Get reads a NodeAttestation.
func (w *StatusWriter) Get(ctx context.Context, name string) (*attestation.NodeAttestation, error) {
	obj, err := w.store.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return obj.(*attestation.NodeAttestation), nil
}

// Write applies change to the stored NodeAttestation's status, retrying on
// conflicts with the latest object; change may refuse with an error.
func (w *StatusWriter) Write(ctx context.Context, name string, change func(*attestation.NodeAttestation) error, dryRun []string) (*attestation.NodeAttestation, error) {
	update := func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
		n := old.(*attestation.NodeAttestation).DeepCopy()
		if err := change(n); err != nil {
			return nil, err
		}
		return n, nil
	}
	obj, _, err := w.store.Update(ctx, name, rest.DefaultUpdatedObjectInfo(nil, update), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc,
		false, &metav1.UpdateOptions{DryRun: dryRun, FieldManager: "rekey-attestation"})
	if err != nil {
		return nil, err
	}
	return obj.(*attestation.NodeAttestation), nil
}

// SetReady sets the Ready condition, keeping its transition time when its
// status does not change.
func SetReady(n *attestation.NodeAttestation, status metav1.ConditionStatus, reason, msg string, now time.Time) {
	meta.SetStatusCondition(&n.Status.Conditions, metav1.Condition{
		Type: ConditionReady, Status: status, Reason: reason, Message: message.Cap(msg), ObservedGeneration: n.Generation, LastTransitionTime: metav1.NewTime(now),
	})
}

// statusStore is what the challenge subresource reads and writes
// (StatusWriter).
type statusStore interface {
	Get(ctx context.Context, name string) (*attestation.NodeAttestation, error)
	Write(ctx context.Context, name string, change func(*attestation.NodeAttestation) error, dryRun []string) (*attestation.NodeAttestation, error)
}

// ChallengeREST serves POST of a ChallengeRequest to
// nodeattestations/NAME/challenge: rekey checks the spec's EK and AK under
// its policy and answers with the NodeAttestation holding a fresh
// challenge, or records the refusal in status and answers 403 with it.
type ChallengeREST struct {
	status     statusStore
	challenger Challenger
	clock      clock.PassiveClock
}

var (
	_ rest.NamedCreater             = &ChallengeREST{}
	_ rest.GroupVersionKindProvider = &ChallengeREST{}
)

// New returns the request kind.
func (r *ChallengeREST) New() runtime.Object { return &attestation.ChallengeRequest{} }

// Destroy does nothing: the main resource owns the store.
func (r *ChallengeREST) Destroy() {}

// GroupVersionKind says the subresource takes ChallengeRequests.
func (r *ChallengeREST) GroupVersionKind(containingGV schema.GroupVersion) schema.GroupVersionKind {
	return containingGV.WithKind("ChallengeRequest")
}

// Create makes a challenge for the NodeAttestation's current spec.
func (r *ChallengeREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	if _, ok := obj.(*attestation.ChallengeRequest); !ok {
		return nil, apierrors.NewBadRequest("the challenge subresource takes a ChallengeRequest")
	}
	if options == nil {
		options = &metav1.CreateOptions{}
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	if r.challenger == nil {
		return nil, apierrors.NewServiceUnavailable("this server does not answer attestation challenges")
	}
	current, err := r.status.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(options.DryRun) > 0 {
		// A challenge counts an attempt and stores a secret: a dry run
		// stops before.
		return current, nil
	}
	challenge, fingerprint, err := r.challenger.Challenge(ctx, name, &current.Spec)
	var refusal *attest.Refusal
	if err != nil && !errors.As(err, &refusal) {
		return nil, apierrors.NewInternalError(fmt.Errorf("making the challenge: %w", err))
	}
	now := r.clock.Now()
	updated, werr := r.status.Write(ctx, name, func(n *attestation.NodeAttestation) error {
		if n.Generation != current.Generation {
			return apierrors.NewConflict(attestation.Resource("nodeattestations"), name,
				fmt.Errorf("the spec changed while the challenge was made; ask again"))
		}
		if fingerprint != "" {
			n.Status.EKFingerprint = fingerprint
		}
		if refusal != nil {
			n.Status.Phase, n.Status.Challenge = attestation.NodeAttestationRefused, nil
			SetReady(n, metav1.ConditionFalse, refusal.Reason, refusal.Message, now)
			return nil
		}
		n.Status.Phase, n.Status.Challenge = attestation.NodeAttestationChallenged, challenge
		SetReady(n, metav1.ConditionFalse, "Challenged",
			fmt.Sprintf("waiting for a certificate request that answers the challenge (until %s)", challenge.ExpirationTime.UTC().Format(time.RFC3339)), now)
		return nil
	}, nil)
	if werr != nil {
		return nil, werr
	}
	if refusal != nil {
		return nil, apierrors.NewForbidden(attestation.Resource("nodeattestations"), name, refusal)
	}
	return updated, nil
}
