package issuer

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
)

// ReasonAutoApproved is the reason of an Approved condition added without a
// person.
const ReasonAutoApproved = "AutoApproved"

// Subresources checked by the SubjectAccessReview (verb create, group
// certificates.rekey.io, resource certificatesigningrequests).
const (
	SubresourceSelfNodeClient = "selfnodeclient"
	SubresourceNodeClient     = "nodeclient"
)

// AutoApproveNodeClient approves a request when its signer is in NodeClient
// mode, the request is shaped like a node client request, and a
// SubjectAccessReview says the requester (from spec, which the server
// stamped from the authenticated user) may have it. nil means a person
// decides; an error means the review could not be asked.
func AutoApproveNodeClient(ctx context.Context, authz authorizer.Authorizer, signer *certv1alpha1.Signer, csr *certv1alpha1.CertificateSigningRequest) (*Decision, error) {
	if signer.Spec.Approval.Mode != certv1alpha1.ApprovalNodeClient {
		return nil, nil
	}
	subresource, ok := NodeClientSubresource(csr)
	if !ok {
		return nil, nil
	}
	decision, _, err := authz.Authorize(ctx, authorizer.AttributesRecord{
		User:            Requester(csr),
		Verb:            "create",
		APIGroup:        certv1alpha1.GroupName,
		APIVersion:      "*",
		Resource:        "certificatesigningrequests",
		Subresource:     subresource,
		ResourceRequest: true,
	})
	if err != nil {
		return nil, fmt.Errorf("SubjectAccessReview for %s: %w", csr.Name, err)
	}
	if decision != authorizer.DecisionAllow {
		return nil, nil
	}
	return &Decision{
		Reason:  ReasonAutoApproved,
		Message: fmt.Sprintf("Auto approving node client certificate after SubjectAccessReview (create certificatesigningrequests/%s).", subresource),
	}, nil
}

type nodeClientGrantKey struct{}

// WithNodeClientGrant marks ctx as that of a create through
// certificatesigningrequests/NAME/<subresource> (selfnodeclient or
// nodeclient), whose own authorization was the NodeClient permission: the
// server's authorization filter allowed "create" on that subresource for
// the user in ctx before the body was read. Only that subresource's REST
// may set it. The create then needs no second review, and a request the
// permission does not cover is refused instead of stored pending.
func WithNodeClientGrant(ctx context.Context, subresource string) context.Context {
	return context.WithValue(ctx, nodeClientGrantKey{}, subresource)
}

// HasNodeClientGrant says whether ctx is that of such a create.
func HasNodeClientGrant(ctx context.Context) bool {
	_, ok := nodeClientGrant(ctx)
	return ok
}

func nodeClientGrant(ctx context.Context) (string, bool) {
	s, ok := ctx.Value(nodeClientGrantKey{}).(string)
	return s, ok
}

// Requester is the user who created the request, as the server recorded it.
func Requester(csr *certv1alpha1.CertificateSigningRequest) user.Info {
	extra := make(map[string][]string, len(csr.Spec.Extra))
	for k, v := range csr.Spec.Extra {
		extra[k] = v
	}
	return &user.DefaultInfo{Name: csr.Spec.Username, UID: csr.Spec.UID, Groups: csr.Spec.Groups, Extra: extra}
}

// The usage sets of a node client request (sorted), as kube's
// ValidateKubeletClientCSR accepts them: a kubelet asks for key
// encipherment only with an RSA key, and a stock kubelet's ECDSA key asks
// without it.
var (
	nodeClientUsages          = []string{string(certv1alpha1.UsageClientAuth), string(certv1alpha1.UsageDigitalSignature), string(certv1alpha1.UsageKeyEncipherment)}
	nodeClientUsagesNoEncrypt = []string{string(certv1alpha1.UsageClientAuth), string(certv1alpha1.UsageDigitalSignature)}
)

// NodeClientSubresource says whether a request is shaped like a node client
// certificate request (organization exactly system:nodes, CN
// system:node:<name>, no SANs, the node client usages) and which permission
// to check: selfnodeclient when the CN names the requester, else nodeclient.
func NodeClientSubresource(csr *certv1alpha1.CertificateSigningRequest) (string, bool) {
	req, err := validation.ParseStoredCSR(csr.Spec.Request)
	if err != nil {
		return "", false
	}
	if !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) || !strings.HasPrefix(req.Subject.CommonName, "system:node:") ||
		len(req.DNSNames)+len(req.IPAddresses)+len(req.EmailAddresses)+len(req.URIs) > 0 {
		return "", false
	}
	usages := make([]string, len(csr.Spec.Usages))
	for i, u := range csr.Spec.Usages {
		usages[i] = string(u)
	}
	sort.Strings(usages)
	usages = slices.Compact(usages)
	if !slices.Equal(usages, nodeClientUsages) && !slices.Equal(usages, nodeClientUsagesNoEncrypt) {
		return "", false
	}
	if req.Subject.CommonName == csr.Spec.Username {
		return SubresourceSelfNodeClient, true
	}
	return SubresourceNodeClient, true
}
