package issuer

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/apis/certificates"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/authority"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	"rekey.io/rekey/pkg/policy"
	"rekey.io/rekey/pkg/signerauthz"
)

// Synchronous decides in the request path, on every replica: the
// certificate of an approval, and approval and certificate at create for
// signers that approve without a person. Whatever it cannot decide now (no
// Signer object, a CA this replica cannot reach, a review that failed) it
// leaves undecided, and the controllers finish it.
type Synchronous struct {
	Signing *authority.Signing
	// Signers lists Signer objects; Synced says the list is complete.
	Signers certlisters.SignerLister
	Synced  func() bool
	// Authorizer checks the approver's "approve" permission again (the
	// SignerApproval admission plugin checks it first) and answers the
	// NodeClient SubjectAccessReview.
	Authorizer authorizer.Authorizer
	// Cluster reads Nodes and Services for NodeServing approval; nil
	// without a host cluster.
	Cluster ClusterView
	// Attestor verifies TPM evidence for signers in Attestation mode; nil
	// leaves their requests pending.
	Attestor Attestor
	// Limiter bounds, per requester, the creates decided at create (nil:
	// no limit). See limit.
	Limiter *RequesterLimiter
}

// Attestor decides a request for a signer in Attestation approval mode
// from the TPM evidence in its spec.request (package nodeattest). A
// refusal is an Attestation that did not pass; an error means nothing
// was decided.
type Attestor interface {
	Attest(ctx context.Context, signer *certv1alpha1.Signer, csr *certv1alpha1.CertificateSigningRequest) (*Attestation, error)
}

// served returns the Signer object serving the request's signer name, or
// nil when there is none (an external signer) or the list is not there yet.
func (s *Synchronous) served(signerName string) (*certv1alpha1.Signer, error) {
	if s.Synced != nil && !s.Synced() {
		return nil, nil
	}
	signer, err := s.Signers.Get(validation.SignerObjectName(signerName))
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return signer, err
}

// AtApproval signs a request in the write that approves it. The caller
// calls it only once admission allowed the write and only for a request
// that will be stored approved, without a certificate and not failed. The
// approver's permission is checked here again, so that no configuration of
// admission plugins lets an approval sign without it: an approver without
// "approve" on the signer gets Forbidden and nothing is signed.
func (s *Synchronous) AtApproval(ctx context.Context, csr *certificates.CertificateSigningRequest, approvedAt time.Time) (Outcome, error) {
	signer, err := s.served(csr.Spec.SignerName)
	if signer == nil || err != nil {
		return Outcome{}, nil
	}
	approver, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return Outcome{}, apierrors.NewForbidden(certificates.Resource("certificatesigningrequests"), csr.Name, fmt.Errorf("no user in the request"))
	}
	if d := signerauthz.Check(ctx, s.Authorizer, approver, signerauthz.VerbApprove, csr.Spec.SignerName); !d.Allowed {
		return Outcome{}, apierrors.NewForbidden(certificates.Resource("certificatesigningrequests"), csr.Name,
			fmt.Errorf("%s", signerauthz.ForbiddenMessage(approver, signerauthz.VerbApprove, csr.Spec.SignerName)))
	}
	versioned, err := toVersioned(csr)
	if err != nil {
		return Outcome{}, err
	}
	signed, err := s.Signing.Sign(ctx, signer, versioned, approvedAt, PathApproval)
	if err != nil {
		// The signer controller signs it when it can.
		klog.FromContext(ctx).V(2).Info("Approved without a certificate; the signer controller will sign", "csr", csr.Name, "err", err)
		return Outcome{}, nil
	}
	return outcome(signed), nil
}

// AtCreate decides a request at create, after it was authorized, validated
// and admitted: for a signer that approves without a person, the review
// runs now, and an approved request is signed in the same write. A request
// not approved now is stored pending, for a person (or a later review).
//
// A create through the selfnodeclient or nodeclient subresource
// (WithNodeClientGrant) promised the requester a decision: a request that
// permission does not cover is refused, and nothing is stored.
func (s *Synchronous) AtCreate(ctx context.Context, csr *certificates.CertificateSigningRequest) (Outcome, error) {
	if grant, ok := nodeClientGrant(ctx); ok {
		return s.atGrantedCreate(ctx, grant, csr)
	}
	signer, err := s.served(csr.Spec.SignerName)
	if signer == nil || err != nil || signer.Spec.Approval.Mode == certv1alpha1.ApprovalManual {
		return Outcome{}, nil
	}
	versioned, err := toVersioned(csr)
	if err != nil {
		return Outcome{}, err
	}
	// Before anything that works or signs (and before a challenge is
	// consumed): a refused create can be retried as it is.
	if err := s.limit(ctx, signer, versioned); err != nil {
		return Outcome{}, err
	}
	if signer.Spec.Approval.Mode == certv1alpha1.ApprovalAttestation {
		return s.attestAtCreate(ctx, signer, versioned)
	}
	approval, err := AutoApprove(ctx, s.Authorizer, s.Cluster, signer, versioned)
	if err != nil {
		// A refusal is the approver controller's to report (an event);
		// a failed review, its to retry.
		klog.FromContext(ctx).V(2).Info("Stored pending", "csr", csr.Name, "reason", err.Error())
		return Outcome{}, nil
	}
	if approval == nil {
		return Outcome{}, nil
	}
	out := s.signAtCreate(ctx, signer, versioned)
	out.Approval = approval
	return out, nil
}

// atGrantedCreate decides a create whose authorization was the NodeClient
// permission named by grant: approved and signed, or refused with the
// reason.
func (s *Synchronous) atGrantedCreate(ctx context.Context, grant string, csr *certificates.CertificateSigningRequest) (Outcome, error) {
	refuse := func(format string, args ...any) (Outcome, error) {
		return Outcome{}, apierrors.NewBadRequest(fmt.Sprintf("certificatesigningrequests/%s: ", grant) + fmt.Sprintf(format, args...))
	}
	signer, err := s.served(csr.Spec.SignerName)
	if err != nil {
		return Outcome{}, apierrors.NewServiceUnavailable(fmt.Sprintf("reading Signer of %q: %v", csr.Spec.SignerName, err))
	}
	if signer == nil {
		if s.Synced != nil && !s.Synced() {
			return Outcome{}, apierrors.NewServiceUnavailable("the Signer list is not loaded yet; retry")
		}
		if isBuiltIn(csr.Spec.SignerName) {
			// The leader creates the built-in Signers once it leads: a
			// server that just started serves before that.
			return Outcome{}, apierrors.NewServiceUnavailable(fmt.Sprintf("the built-in Signer of %q does not exist yet (the server is starting); retry", csr.Spec.SignerName))
		}
		return refuse("spec.signerName %q is not served by a Signer of this server; create the request through certificatesigningrequests instead", csr.Spec.SignerName)
	}
	if signer.Spec.Approval.Mode != certv1alpha1.ApprovalNodeClient {
		return refuse("spec.signerName %q approves in %s mode, not NodeClient; create the request through certificatesigningrequests instead", csr.Spec.SignerName, signer.Spec.Approval.Mode)
	}
	versioned, err := toVersioned(csr)
	if err != nil {
		return Outcome{}, err
	}
	shape, ok := NodeClientSubresource(versioned)
	switch {
	case !ok:
		return refuse("spec.request and spec.usages must be a node client request: subject organization exactly system:nodes, common name system:node:<name>, no SANs, usages exactly client auth, digital signature, key encipherment")
	case shape != grant && grant == SubresourceSelfNodeClient:
		return refuse("the request's common name is not the requester %q: selfnodeclient covers only your own node's certificate (another node's goes through nodeclient)", csr.Spec.Username)
	case shape != grant:
		return refuse("the request's common name is the requester %q: your own node's certificate goes through selfnodeclient", csr.Spec.Username)
	}
	if err := s.limit(ctx, signer, versioned); err != nil {
		return Outcome{}, err
	}
	out := s.signAtCreate(ctx, signer, versioned)
	out.Approval = &Decision{
		Reason:  ReasonAutoApproved,
		Message: fmt.Sprintf("Auto approving node client certificate: the create was authorized as create certificatesigningrequests/%s.", grant),
	}
	return out, nil
}

// attestAtCreate: the only moment a request in Attestation mode is
// decided, since its evidence answers a single-use challenge. A request
// whose evidence passes is approved and signed in its create; one that
// does not is stored pending with an Attested=False condition saying why,
// and nothing approves it later.
//
// Attestation proves which machine asks, not that a name is its: a request
// that could serve or names anything must first pass the NodeServing
// address rules (AttestedNamesRefusal), before the evidence is verified,
// so that a refusal for its names spends no challenge.
func (s *Synchronous) attestAtCreate(ctx context.Context, signer *certv1alpha1.Signer, csr *certv1alpha1.CertificateSigningRequest) (Outcome, error) {
	if s.Attestor == nil {
		return Outcome{}, nil
	}
	if refused := AttestedNamesRefusal(s.Cluster, signer, csr); refused != nil {
		klog.FromContext(ctx).V(2).Info("Stored pending: names refused before attestation", "csr", csr.Name, "reason", refused.Reason)
		return Outcome{Attestation: refused}, nil
	}
	att, err := s.Attestor.Attest(ctx, signer, csr)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Stored pending: attestation not decided", "csr", csr.Name, "err", err)
		return Outcome{}, nil
	}
	if !att.Passed {
		return Outcome{Attestation: att}, nil
	}
	out := s.signAtCreate(ctx, signer, csr)
	out.Attestation = att
	out.Approval = &Decision{Reason: ReasonAutoApproved, Message: "Auto approving after TPM attestation (see the Attested condition)."}
	if signer.Spec.SignerName == policy.InsecureTestSignerName {
		// Nothing was attested: the message must not say a TPM was.
		out.Approval.Message = "Auto approving without verifying anything: the " + policy.InsecureTestSignerName + " signer approves every request (development only; see the Attested condition)."
	}
	return out, nil
}

// signAtCreate signs a request approved at create; what cannot be signed
// now (the CA out of reach) is left to the signer controller.
func (s *Synchronous) signAtCreate(ctx context.Context, signer *certv1alpha1.Signer, csr *certv1alpha1.CertificateSigningRequest) Outcome {
	signed, err := s.Signing.Sign(ctx, signer, csr, s.Signing.Clock.Now(), PathCreate)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Approved at create without a certificate; the signer controller will sign", "csr", csr.Name, "err", err)
		return Outcome{}
	}
	return outcome(signed)
}

func toVersioned(csr *certificates.CertificateSigningRequest) (*certv1alpha1.CertificateSigningRequest, error) {
	out := &certv1alpha1.CertificateSigningRequest{}
	if err := certv1alpha1.Convert_certificates_CertificateSigningRequest_To_v1alpha1_CertificateSigningRequest(csr, out, nil); err != nil {
		return nil, fmt.Errorf("converting request %s: %w", csr.Name, err)
	}
	return out, nil
}

// isBuiltIn says whether signerName is one of the Signers every server
// creates itself (those of a host cluster or of --insecure-test only are
// not: a server without them refuses their requests for good).
func isBuiltIn(signerName string) bool {
	for _, b := range policy.BuiltIns(false, false) {
		if b.Signer.Spec.SignerName == signerName {
			return true
		}
	}
	return false
}
