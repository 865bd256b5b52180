// Package approver approves, for the signers that approve without a person
// (issuer.AutoApproves), what the create of a request could not decide:
// node client certificate requests in NodeClient mode when a
// SubjectAccessReview says the requester may have them, and node serving
// certificate requests in NodeServing mode whose addresses are the Node's
// (issuer.DecideNodeServing). Requests in Attestation mode are decided at
// their create only (their evidence answers a single-use challenge, and
// their names are checked there): this controller never approves one.
// Nothing else is ever auto-approved.
package approver

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/apis/message"
	"rekey.io/rekey/pkg/controller/csrcontroller"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	certinformers "rekey.io/rekey/pkg/generated/informers/externalversions/certificates/v1alpha1"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	"rekey.io/rekey/pkg/issuer"
)

// Controller approves node client requests: a csrcontroller loop over
// the pending requests of the signers that approve without a person,
// calling Handle.
type Controller struct {
	client  clientset.Interface
	signers certlisters.SignerLister
	authz   authorizer.Authorizer
	clock   clock.PassiveClock

	csrs         *csrcontroller.Controller
	pending      *pendingRequests
	signerSynced cache.InformerSynced

	cluster issuer.ClusterView
	events  record.EventRecorder
}

// NewController wires the controller. authz answers SubjectAccessReviews:
// in aggregated mode it is the delegating authorizer, which asks the host
// cluster. transform (may be nil) trims the requests it caches.
func NewController(client clientset.Interface, signerInformer certinformers.SignerInformer, authz authorizer.Authorizer,
	cluster issuer.ClusterView, events record.EventRecorder, clk clock.PassiveClock, transform cache.TransformFunc) *Controller {
	c := &Controller{
		client:       client,
		signers:      signerInformer.Lister(),
		authz:        authz,
		cluster:      cluster,
		events:       events,
		clock:        clk,
		signerSynced: signerInformer.Informer().HasSynced,
	}
	c.pending = newPendingRequests(client, transform, func(obj any) { c.csrs.Enqueue(obj) })
	c.csrs = csrcontroller.NewFromSource("approver", c.pending.get, c.pending.list, c.signerSynced, certv1alpha1.IsPending, c.Handle)
	_, _ = signerInformer.Informer().AddEventHandler(c.pending.signerHandler())
	return c
}

// Run approves until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	c.pending.run(ctx)
	c.csrs.Run(ctx, workers, c.signerSynced)
}

// Handle approves a pending request when its signer approves without a
// person and the request passes (issuer.AutoApprove: NodeClient by a
// SubjectAccessReview, NodeServing against the Node; the same decision the
// create of the request takes when it can). Anything else is left for a
// person, NodeServing refusals with an event saying why; nothing is ever
// denied.
func (c *Controller) Handle(ctx context.Context, csr *certv1alpha1.CertificateSigningRequest) error {
	signer, err := c.signers.Get(validation.SignerObjectName(csr.Spec.SignerName))
	if err != nil {
		return nil
	}
	approval, err := issuer.AutoApprove(ctx, c.authz, c.cluster, signer, csr)
	var refusal *issuer.NodeServingRefusal
	if errors.As(err, &refusal) {
		// Left to a person, with the reason where they will look. One
		// request's refusal does not hold up the others.
		c.events.Event(csr, corev1.EventTypeWarning, "NotAutoApproved", message.CapEvent("Not approved automatically: "+refusal.Reason))
		klog.FromContext(ctx).V(2).Info("Not auto-approving", "csr", csr.Name, "reason", refusal.Reason)
		return nil
	}
	if err != nil {
		return err
	}
	if approval == nil {
		klog.FromContext(ctx).V(4).Info("Not auto-approving", "csr", csr.Name, "requester", csr.Spec.Username)
		return nil
	}
	updated := csr.DeepCopy()
	now := metav1.NewTime(c.clock.Now())
	updated.Status.Conditions = append(updated.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
		Type: certv1alpha1.CertificateApproved, Status: metav1.ConditionTrue, Reason: approval.Reason, Message: message.Cap(approval.Message),
		LastUpdateTime: now, LastTransitionTime: now,
	})
	_, err = c.client.CertificatesV1alpha1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, updated, metav1.UpdateOptions{FieldManager: "rekey-approver"})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
