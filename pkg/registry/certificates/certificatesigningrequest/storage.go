package certificatesigningrequest

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/util/dryrun"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/growstack"
	"rekey.io/rekey/pkg/issuer"
	"rekey.io/rekey/pkg/registry"
)

// REST is the main resource's storage.
type REST struct {
	*genericregistry.Store
	issuing bool
	// dryRunner, when set, says in a dry-run create's warnings what the
	// request's signer would decide (dryrun.go).
	dryRunner DryRunner
}

// Create stores a request. With an issuer, a request its signer approves
// without a person is approved and signed in this write (see Issuer). A
// dry run decides nothing, but its response carries, as a warning, what
// the signer's policy would issue or the rule the request breaks: the
// object it evaluates is the one validation and admission allowed, with
// the requester stamped from the authenticated user.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	growstack.ForREST()
	if dryrun.IsDryRun(options.DryRun) {
		return r.dryRunCreate(ctx, obj, createValidation, options)
	}
	if r.issuing {
		var w *write
		ctx, w = withWrite(ctx)
		createValidation = w.afterCreateValidation(createValidation)
	}
	return r.Store.Create(ctx, obj, createValidation, options)
}

// ApprovalREST is /approval. With an issuer, an approval of a request for
// a signer this server serves carries the certificate (or the failure) in
// the same write.
type ApprovalREST struct {
	*registry.SubresourceREST
	issuing bool
}

func (r *ApprovalREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	growstack.ForREST()
	if r.issuing && !dryrun.IsDryRun(options.DryRun) {
		var w *write
		ctx, w = withWrite(ctx)
		updateValidation = w.afterUpdateValidation(updateValidation)
	}
	return r.SubresourceREST.Update(ctx, name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
}

var _ rest.ShortNamesProvider = &REST{}
var _ rest.CategoriesProvider = &REST{}

// ShortNames lets `kubectl get rcsr` work.
func (r *REST) ShortNames() []string { return []string{"rcsr"} }

// Categories lets `kubectl get rekey` list requests among rekey's kinds.
func (r *REST) Categories() []string { return []string{"rekey"} }

// Storage holds the main resource and its subresources.
type Storage struct {
	CertificateSigningRequest *REST
	Status                    *registry.SubresourceREST
	Approval                  *ApprovalREST
	// SelfNodeClient and NodeClient are nil without an issuer: they
	// promise a decision in the create, which only an issuer makes.
	SelfNodeClient *NodeClientREST
	NodeClient     *NodeClientREST

	signers *signerLookup
}

// UseSigners has the request table read Signers (their policies give a
// pending request's REQUESTEDDURATION) from the Signer storage, which the
// server makes after this one.
func (s *Storage) UseSigners(g SignerGetter) { s.signers.getter.Store(&g) }

// NewStorage builds the stores for the main resource, /status and
// /approval. iss, when not nil, decides in the approval and create writes
// (package issuer); nil leaves every decision to the controllers.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, clk clock.PassiveClock, iss Issuer) (*Storage, error) {
	strategy := NewStrategy(scheme, clk)
	signers := &signerLookup{}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &certificates.CertificateSigningRequest{} },
		NewListFunc:               func() runtime.Object { return &certificates.CertificateSigningRequestList{} },
		PredicateFunc:             Matcher,
		DefaultQualifiedResource:  certificates.Resource("certificatesigningrequests"),
		SingularQualifiedResource: certificates.Resource("certificatesigningrequest"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: newTable(signers),
	}
	options := &generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}
	if err := store.CompleteWithOptions(options); err != nil {
		return nil, err
	}
	issuing := iss != nil
	if issuing {
		// Under the watch cache, so that every write of every subresource
		// passes; only writes the RESTs mark are decided on.
		store.Storage.Storage = &issuingStorage{Interface: store.Storage.Storage, issuer: iss, clock: clk}
	}

	requests := &REST{Store: store, issuing: issuing}
	if d, ok := iss.(DryRunner); ok {
		requests.dryRunner = d
	}
	s := &Storage{
		CertificateSigningRequest: requests,
		Status:                    registry.NewSubresourceREST(store, NewStatusStrategy(strategy)),
		Approval:                  &ApprovalREST{SubresourceREST: registry.NewSubresourceREST(store, NewApprovalStrategy(strategy)), issuing: issuing},
		signers:                   signers,
	}
	if issuing {
		s.SelfNodeClient = &NodeClientREST{requests: requests, subresource: issuer.SubresourceSelfNodeClient}
		s.NodeClient = &NodeClientREST{requests: requests, subresource: issuer.SubresourceNodeClient}
	}
	return s, nil
}

// NodeClientREST is certificatesigningrequests/NAME/selfnodeclient and
// certificatesigningrequests/NAME/nodeclient: a create of request NAME
// whose authorization is the NodeClient permission itself ("create" on
// the subresource, the permission the NodeClient review asks about). The
// server's authorization filter has checked it before the body is read,
// so the create needs no second review: the request is approved and
// signed in its create, or refused with the reason (a request for another
// signer or not shaped like a node client request), and nothing is
// stored. Everything else is the main resource's create: validation, the
// requester stamped from the authenticated user, admission.
type NodeClientREST struct {
	requests    *REST
	subresource string
}

var _ rest.NamedCreater = &NodeClientREST{}

// New returns the kind the subresource takes and answers.
func (r *NodeClientREST) New() runtime.Object { return &certificates.CertificateSigningRequest{} }

// Destroy does nothing: the main resource owns the store.
func (r *NodeClientREST) Destroy() {}

// Create stores request name, approved and signed.
func (r *NodeClientREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	csr, ok := obj.(*certificates.CertificateSigningRequest)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a CertificateSigningRequest, got %T", obj))
	}
	switch {
	case csr.Name == "" && csr.GenerateName == "":
		csr.Name = name
	case csr.Name != name:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("metadata.name %q must be the name in the path, %q (metadata.generateName is not supported here)", csr.Name, name))
	}
	return r.requests.Create(issuer.WithNodeClientGrant(ctx, r.subresource), csr, createValidation, options)
}
