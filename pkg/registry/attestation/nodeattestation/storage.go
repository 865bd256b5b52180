package nodeattestation

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/apis/attestation"
	"rekey.io/rekey/pkg/registry"
	"rekey.io/rekey/pkg/registry/printers"
)

// table prints what `kubectl get rnodeatt` shows.
var table = printers.Table[*attestation.NodeAttestation]{
	Columns: []metav1.TableColumnDefinition{
		{Name: "Policy", Type: "string", Description: "The AttestationPolicy."},
		{Name: "Phase", Type: "string", Description: "Challenged, Attested or Refused."},
		{Name: "Bound", Type: "string", Description: "The node the EK is bound to."},
		{Name: "EK", Type: "string", Priority: 1, Description: "SHA-256 of the EK public key."},
		{Name: "Ready", Type: "string", Description: "Whether the last attestation succeeded."},
		{Name: "Age", Type: "string", Description: "Time since creation."},
	},
	Row: func(n *attestation.NodeAttestation) []interface{} {
		none := func(s string) string {
			if s == "" {
				return "<none>"
			}
			return s
		}
		return []interface{}{n.Spec.PolicyName, none(string(n.Status.Phase)), none(n.Status.BoundNode), none(n.Status.EKFingerprint),
			printers.ConditionStatus(n.Status.Conditions, "Ready"), printers.Age(n.CreationTimestamp)}
	},
}

// Storage is the NodeAttestation resource, its subresources, and the
// writer of status on rekey's behalf.
type Storage struct {
	NodeAttestation *registry.REST
	Status          *registry.SubresourceREST
	Challenge       *ChallengeREST
	StatusWriter    *StatusWriter
}

// NewStorage returns the storage. newChallenger builds the challenger
// from the writer of NodeAttestation status (the challenger records what
// it decides through it), so the two are made in one order, without a
// field set afterwards; it may return nil (the challenge subresource then
// answers 503).
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, newChallenger func(*StatusWriter) Challenger, clk clock.PassiveClock) (*Storage, error) {
	s := NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &attestation.NodeAttestation{} },
		NewListFunc:               func() runtime.Object { return &attestation.NodeAttestationList{} },
		DefaultQualifiedResource:  attestation.Resource("nodeattestations"),
		SingularQualifiedResource: attestation.Resource("nodeattestation"),
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		ResetFieldsStrategy:       s,
		TableConvertor:            table,
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter}); err != nil {
		return nil, err
	}
	server := *store
	server.UpdateStrategy = serverStatusStrategy{s}
	server.ResetFieldsStrategy = serverStatusStrategy{s}
	writer := &StatusWriter{store: &server}
	return &Storage{
		NodeAttestation: registry.NewREST(store, "rnodeatt"),
		Status:          registry.NewSubresourceREST(store, statusStrategy{serverStatusStrategy{s}}),
		Challenge:       &ChallengeREST{status: writer, challenger: newChallenger(writer), clock: clk},
		StatusWriter:    writer,
	}, nil
}
