// Package approver approves node client certificate requests for signers in
// NodeClient mode when a SubjectAccessReview says the requester may have
// them. Nothing else is ever auto-approved.
package approver

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/controller/csrcontroller"
	"rekey.io/rekey/pkg/controller/csrutil"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	certinformers "rekey.io/rekey/pkg/generated/informers/externalversions/certificates/v1alpha1"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
)

// ReasonAutoApproved is the reason of the Approved condition this controller adds.
const ReasonAutoApproved = "AutoApproved"

// Subresources checked by the SubjectAccessReview (verb create, group
// certificates.rekey.io, resource certificatesigningrequests).
const (
	SubresourceSelfNodeClient = "selfnodeclient"
	SubresourceNodeClient     = "nodeclient"
)

// Controller approves node client requests: a csrcontroller loop over
// pending requests calling Handle.
type Controller struct {
	client  clientset.Interface
	signers certlisters.SignerLister
	authz   authorizer.Authorizer
	clock   clock.PassiveClock

	csrs         *csrcontroller.Controller
	signerSynced cache.InformerSynced
}

// NewController wires the controller. authz answers SubjectAccessReviews:
// in aggregated mode it is the delegating authorizer, which asks the host
// cluster.
func NewController(client clientset.Interface, csrInformer certinformers.CertificateSigningRequestInformer, signerInformer certinformers.SignerInformer, authz authorizer.Authorizer, clk clock.PassiveClock) *Controller {
	c := &Controller{
		client:       client,
		signers:      signerInformer.Lister(),
		authz:        authz,
		clock:        clk,
		signerSynced: signerInformer.Informer().HasSynced,
	}
	c.csrs = csrcontroller.New("approver", csrInformer, csrutil.IsPending, c.Handle)
	return c
}

// Run approves until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	c.csrs.Run(ctx, workers, c.signerSynced)
}

// Handle approves a pending request when its signer is in NodeClient mode,
// the request is shaped like a node client request, and a
// SubjectAccessReview says the requester may have it. Anything else is
// left for a person; nothing is ever denied.
func (c *Controller) Handle(ctx context.Context, csr *certv1alpha1.CertificateSigningRequest) error {
	signer, err := c.signers.Get(validation.SignerObjectName(csr.Spec.SignerName))
	if err != nil || signer.Spec.Approval.Mode != certv1alpha1.ApprovalNodeClient {
		return nil
	}
	subresource, ok := NodeClientSubresource(csr)
	if !ok {
		// Not shaped like a node client request: a person decides.
		return nil
	}
	decision, reason, err := c.authz.Authorize(ctx, authorizer.AttributesRecord{
		User:            requester(csr),
		Verb:            "create",
		APIGroup:        certv1alpha1.GroupName,
		APIVersion:      "*",
		Resource:        "certificatesigningrequests",
		Subresource:     subresource,
		ResourceRequest: true,
	})
	if err != nil {
		return fmt.Errorf("SubjectAccessReview for %s: %w", csr.Name, err)
	}
	if decision != authorizer.DecisionAllow {
		klog.FromContext(ctx).V(2).Info("Not auto-approving: requester lacks permission", "csr", csr.Name, "requester", csr.Spec.Username, "subresource", subresource, "reason", reason)
		return nil
	}
	updated := csr.DeepCopy()
	now := metav1.NewTime(c.clock.Now())
	updated.Status.Conditions = append(updated.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
		Type: certv1alpha1.CertificateApproved, Status: metav1.ConditionTrue, Reason: ReasonAutoApproved,
		Message:        fmt.Sprintf("Auto approving node client certificate after SubjectAccessReview (create certificatesigningrequests/%s).", subresource),
		LastUpdateTime: now, LastTransitionTime: now,
	})
	_, err = c.client.CertificatesV1alpha1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, updated, metav1.UpdateOptions{FieldManager: "rekey-approver"})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func requester(csr *certv1alpha1.CertificateSigningRequest) user.Info {
	extra := make(map[string][]string, len(csr.Spec.Extra))
	for k, v := range csr.Spec.Extra {
		extra[k] = v
	}
	return &user.DefaultInfo{Name: csr.Spec.Username, UID: csr.Spec.UID, Groups: csr.Spec.Groups, Extra: extra}
}

var nodeClientUsages = []string{string(certv1alpha1.UsageClientAuth), string(certv1alpha1.UsageDigitalSignature), string(certv1alpha1.UsageKeyEncipherment)}

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
	if !slices.Equal(usages, nodeClientUsages) {
		return "", false
	}
	if req.Subject.CommonName == csr.Spec.Username {
		return SubresourceSelfNodeClient, true
	}
	return SubresourceNodeClient, true
}
