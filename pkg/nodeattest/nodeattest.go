// Package nodeattest is the server side of TPM node attestation: it
// answers a NodeAttestation's challenge subresource and decides, at the
// create of a request for a signer in Attestation approval mode, whether
// the request's TPM evidence answers the node's challenge (package attest
// verifies; this package finds the policy, the node and the records).
package nodeattest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/apis/attestation"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/message"
	"rekey.io/rekey/pkg/attest"
	attlisters "rekey.io/rekey/pkg/generated/listers/attestation/v1alpha1"
	"rekey.io/rekey/pkg/issuer"
	"rekey.io/rekey/pkg/nodeuser"
	"rekey.io/rekey/pkg/policy"
	"rekey.io/rekey/pkg/registry/attestation/nodeattestation"
)

// InsecureTestSignerName is the development signer that approves every
// node-shaped request without evidence (seed 004's null attestor); it is
// served only when the server is started with it enabled.
const InsecureTestSignerName = policy.InsecureTestSignerName

// NodeAttestations reads a node's NodeAttestation and writes its status.
type NodeAttestations interface {
	Get(ctx context.Context, name string) (*attestation.NodeAttestation, error)
	Write(ctx context.Context, name string, change func(*attestation.NodeAttestation) error, dryRun []string) (*attestation.NodeAttestation, error)
}

// Service answers challenges and attests requests.
type Service struct {
	Policies attlisters.AttestationPolicyLister
	// Synced says the policy list is complete.
	Synced func() bool
	Store  attest.Store
	Clock  clock.PassiveClock
	// Nodes is set once the NodeAttestation storage exists.
	Nodes NodeAttestations
	// InsecureTestSigner approves requests for InsecureTestSignerName
	// without verifying anything.
	InsecureTestSigner bool
	// Authorizer decides who may answer a node's challenge: whoever may
	// ask for it (create nodeattestations/challenge of the node).
	Authorizer authorizer.Authorizer
}

// verifier builds the verifier of a named policy; a missing policy is a
// refusal (the node named it), a list not yet complete an error.
func (s *Service) verifier(name string) (*attest.Verifier, []string, error) {
	if s.Synced != nil && !s.Synced() {
		return nil, nil, errors.New("the AttestationPolicies are not read yet")
	}
	p, err := s.Policies.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil, &attest.Refusal{Reason: "PolicyNotFound", Message: fmt.Sprintf("AttestationPolicy %q does not exist", name)}
	}
	if err != nil {
		return nil, nil, err
	}
	policy, err := VerifierPolicy(p)
	if err != nil {
		return nil, nil, err
	}
	return &attest.Verifier{Policy: policy, Store: s.Store, Now: s.Clock.Now}, p.Spec.SignerNames, nil
}

// Challenge implements nodeattestation.Challenger.
func (s *Service) Challenge(ctx context.Context, node string, spec *attestation.NodeAttestationSpec) (*attestation.AttestationChallenge, string, error) {
	v, _, err := s.verifier(spec.PolicyName)
	if err != nil {
		return nil, "", err
	}
	c, fp, err := v.Challenge(ctx, attest.ChallengeRequest{Node: node, EKCertificate: spec.EKCertificate, EKPublic: spec.EKPublic, AKPublic: spec.AKPublic})
	if err != nil {
		return nil, fp, err
	}
	selection := make([]int32, 0, len(v.Policy.PCRs))
	for i := range v.Policy.PCRs {
		selection = append(selection, int32(i))
	}
	slices.Sort(selection)
	return &attestation.AttestationChallenge{
		CredentialBlob: c.CredentialBlob, EncryptedSecret: c.EncryptedSecret,
		ExpirationTime: metav1.NewTime(s.Clock.Now().Add(v.Policy.ChallengeLifetime).Truncate(time.Second)),
		PCRSelection:   selection,
	}, fp, nil
}

// Attest implements issuer.Attestor: it decides a request for a signer in
// Attestation mode. The node is the one the request's subject names; what
// proves it is the TPM that answered that node's challenge (and, after the
// first success, the EK bound to it).
func (s *Service) Attest(ctx context.Context, signer *certv1alpha1.Signer, csr *certv1alpha1.CertificateSigningRequest) (*issuer.Attestation, error) {
	signerName := signer.Spec.SignerName
	if signerName == InsecureTestSignerName {
		if !s.InsecureTestSigner {
			return refused("InsecureTestSignerDisabled", "the %s signer approves only on a server started with --enable-insecure-test-signer", signerName), nil
		}
		return &issuer.Attestation{Passed: true, Decision: issuer.Decision{Reason: "InsecureTest",
			Message: "Nothing was verified: the rekey.io/insecure-test signer approves every request (development only)."}}, nil
	}
	req, err := attest.ParseRequest(csr.Spec.Request)
	if err != nil {
		return refused("InvalidEvidence", "%v", err), nil
	}
	node, ok := strings.CutPrefix(req.CSR.Subject.CommonName, "system:node:")
	if !ok || node == "" || len(utilvalidation.IsDNS1123Subdomain(node)) > 0 {
		return refused("WrongSubject", "common name %s is not system:node:<node name>", message.Quote(req.CSR.Subject.CommonName)), nil
	}
	kind := attest.ClientRequest
	if slices.Contains(csr.Spec.Usages, certv1alpha1.UsageServerAuth) {
		kind = attest.ServingRequest
	}
	if s.Nodes == nil {
		return nil, errors.New("the NodeAttestation storage is not set")
	}
	// Who sent it, before anything of the node's is read: a request that
	// someone else sends in the node's name must neither spend the node's
	// challenge nor leave a mark on its NodeAttestation.
	if refusal, err := s.mayAnswer(ctx, csr, node); refusal != nil || err != nil {
		return refusal, err
	}
	na, err := s.Nodes.Get(ctx, node)
	if apierrors.IsNotFound(err) {
		return refused("NoChallenge", "node %s has no NodeAttestation", node), nil
	}
	if err != nil {
		return nil, err
	}
	attested, err := s.verify(ctx, na.Spec.PolicyName, signerName, node, kind, req)
	s.record(ctx, node, csr.Name, attested, err)
	var refusal *attest.Refusal
	switch {
	case errors.As(err, &refusal):
		return refused(refusal.Reason, "%s", refusal.Message), nil
	case err != nil:
		// The challenge may be spent: the node asks again.
		return refused("VerificationFailed", "the evidence could not be verified now: %v", err), nil
	}
	first := ""
	if attested.FirstUse {
		first = "; EK bound to the node now (first use)"
	}
	return &issuer.Attestation{Passed: true, Decision: issuer.Decision{Reason: "TPMQuoteVerified", Message: fmt.Sprintf(
		"TPM attestation of node %s under AttestationPolicy %s: EK %s (trusted, bound to the node%s), credential activated by the AK, quote of sha256 PCRs %v with the challenge and this request's key, PCR values as the policy requires.",
		node, attested.Policy, attested.EKFingerprint, first, attested.PCRs)}}, nil
}

// mayAnswer refuses a request whose requester (spec.username and groups,
// which the server stamps from the authenticated user at create; never the
// subject the requester wrote) may not answer the node's challenge: a node
// answers only its own, and anyone else only if they may ask for the
// node's challenge (the node's bootstrap identity, an administrator). A
// failed authorization check decides nothing.
func (s *Service) mayAnswer(ctx context.Context, csr *certv1alpha1.CertificateSigningRequest, node string) (*issuer.Attestation, error) {
	extra := make(map[string][]string, len(csr.Spec.Extra))
	for k, v := range csr.Spec.Extra {
		extra[k] = v
	}
	requester := &user.DefaultInfo{Name: csr.Spec.Username, UID: csr.Spec.UID, Groups: csr.Spec.Groups, Extra: extra}
	if own, isNode := nodeuser.NodeName(requester); isNode && own != node {
		return refused("NotThisNode", "requester %s is a node identity and answers only its own node's challenge, not node %s's", message.Quote(requester.Name), node), nil
	}
	decision, _, err := s.Authorizer.Authorize(ctx, authorizer.AttributesRecord{
		User: requester, Verb: "create", APIGroup: attestation.GroupName, APIVersion: "*",
		Resource: "nodeattestations", Subresource: "challenge", Name: node, ResourceRequest: true,
	})
	if err != nil {
		return nil, fmt.Errorf("checking whether %s may answer node %s's challenge: %w", requester.Name, node, err)
	}
	if decision != authorizer.DecisionAllow {
		return refused("RequesterNotAllowed", "requester %s may not answer node %s's challenge: it is not the node and may not ask for the node's challenge (create nodeattestations/challenge %s in %s)",
			message.Quote(requester.Name), node, node, attestation.GroupName), nil
	}
	return nil, nil
}

func (s *Service) verify(ctx context.Context, policyName, signerName, node string, kind attest.RequestKind, req *attest.Request) (*attest.Attested, error) {
	v, gated, err := s.verifier(policyName)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(gated, signerName) {
		return nil, &attest.Refusal{Reason: "SignerNotInPolicy", Message: fmt.Sprintf("AttestationPolicy %s does not list signer %s", policyName, signerName)}
	}
	return v.VerifyRequest(ctx, node, kind, req)
}

// record writes the outcome into the NodeAttestation's status (only for a
// requester mayAnswer let through); a failure is logged, not returned: the request's own Attested condition holds the
// outcome, and the binding is in the store.
func (s *Service) record(ctx context.Context, node, request string, attested *attest.Attested, verr error) {
	now := s.Clock.Now()
	_, err := s.Nodes.Write(ctx, node, func(n *attestation.NodeAttestation) error {
		var refusal *attest.Refusal
		switch {
		case attested != nil:
			// Spent; a refusal spends nothing and leaves it for the node.
			n.Status.Challenge = nil
			n.Status.Phase = attestation.NodeAttestationAttested
			n.Status.BoundNode = attested.Node
			n.Status.EKFingerprint = attested.EKFingerprint
			pcrs := make([]int32, len(attested.PCRs))
			for i, p := range attested.PCRs {
				pcrs[i] = int32(p)
			}
			n.Status.LastAttested = &attestation.AttestedRecord{Time: metav1.NewTime(now), PolicyName: attested.Policy, PCRIndexes: pcrs, FirstUse: attested.FirstUse, Request: request}
			nodeattestation.SetReady(n, metav1.ConditionTrue, "Attested", fmt.Sprintf("certificate request %s answered the challenge", request), now)
		case errors.As(verr, &refusal):
			n.Status.Phase = attestation.NodeAttestationRefused
			nodeattestation.SetReady(n, metav1.ConditionFalse, refusal.Reason, fmt.Sprintf("certificate request %s: %s", request, refusal.Message), now)
		default:
			n.Status.Phase = attestation.NodeAttestationRefused
			nodeattestation.SetReady(n, metav1.ConditionFalse, "VerificationFailed", fmt.Sprintf("certificate request %s: %v", request, verr), now)
		}
		return nil
	}, nil)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Could not record the attestation in the NodeAttestation", "node", node, "csr", request)
	}
}

func refused(reason, format string, args ...any) *issuer.Attestation {
	return &issuer.Attestation{Decision: issuer.Decision{Reason: reason, Message: fmt.Sprintf(format, args...)}}
}
