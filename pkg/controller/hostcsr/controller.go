// Package hostcsr serves the host cluster's own certificates.k8s.io/v1
// CertificateSigningRequests (a stock kubelet's client and serving
// certificates, kubectl certificate approve) for the signer names whose
// Signer says spec.hostCluster.certificateSigningRequests. It approves
// under the Signer's approval mode (NodeClient by a SubjectAccessReview in
// group certificates.k8s.io, the way kube-controller-manager's csrapproving
// does; NodeServing against the Node, issuer.DecideNodeServing; Manual
// leaves it to a person) and signs approved requests, whoever approved
// them, under the Signer's policy with its CA (authority.Signing.Sign, so
// the issuance record, the PENDING count of a rotation and the metrics
// cover them like rekey's own). A CSR of any other signer name is never
// touched: kube-controller-manager or another signer may own it.
package hostcsr

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	certv1informers "k8s.io/client-go/informers/certificates/v1"
	"k8s.io/client-go/kubernetes"
	certv1listers "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/apis/message"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	certinformers "rekey.io/rekey/pkg/generated/informers/externalversions/certificates/v1alpha1"
	rotationinformers "rekey.io/rekey/pkg/generated/informers/externalversions/rotation/v1alpha1"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	"rekey.io/rekey/pkg/issuer"
	"rekey.io/rekey/pkg/registry/printers"
	"rekey.io/rekey/pkg/runner"
)

// Field managers of rekey's writes to native CSRs, the same as for its
// own requests.
const (
	approverFieldManager = "rekey-approver"
	signerFieldManager   = "rekey-signer"
)

// ReasonNotAutoApproved is the reason of the Warning event on a CSR that a
// NodeServing signer leaves to a person (never Denied).
const ReasonNotAutoApproved = "NotAutoApproved"

// Reasons of the events on a CSR rekey decides: approved without a
// person, issued, or failed with the rule it broke (as rekey's own
// requests get them, package csrevents).
const (
	ReasonApproved = "Approved"
	ReasonIssued   = "Issued"
	ReasonFailed   = "Failed"
)

// issuedMessage names the issued certificate's issuer, serial and expiry.
func issuedMessage(certPEM []byte) string {
	certs, err := validation.ParseCertificateChain(certPEM)
	if err != nil || len(certs) == 0 {
		return "the certificate is in status.certificate"
	}
	return printers.IssuedSummary(certs[0])
}

// RecordPrefix prefixes a native CSR's name in its issuance record (and
// so in a rotation's pending renewals), telling it apart from a
// certificates.rekey.io request of the same name.
const RecordPrefix = "certificates.k8s.io:"

// Deps is what the controller is built from.
type Deps struct {
	// Kube writes the CSRs' /approval and /status in the host cluster.
	Kube kubernetes.Interface
	// CSRs is an informer on the host cluster's certificates.k8s.io/v1
	// CSRs (all of them: there is no field selector for a set of signer
	// names); Signers and CAs are rekey's.
	CSRs    certv1informers.CertificateSigningRequestInformer
	Signers certinformers.SignerInformer
	CAs     rotationinformers.CertificateAuthorityInformer
	// Authorizer answers NodeClient's SubjectAccessReviews (the
	// delegating authorizer: the host cluster's RBAC).
	Authorizer authorizer.Authorizer
	// Cluster reads Nodes and Services for NodeServing; nil refuses
	// every NodeServing request.
	Cluster issuer.ClusterView
	Signing *authority.Signing
	// Events go to the host cluster (a cluster-scoped CSR's land in
	// "default").
	Events record.EventRecorder
	Clock  clock.PassiveClock
}

// Controller approves and signs the host cluster's CSRs of the signer
// names rekey serves there.
type Controller struct {
	deps    Deps
	csrs    certv1listers.CertificateSigningRequestLister
	signers certlisters.SignerLister
	queue   workqueue.TypedRateLimitingInterface[string]
	synced  []cache.InformerSynced

	// writtenOver holds, per CSR UID, the resourceVersion this controller
	// last wrote a certificate or failure over, so that a CSR queued again
	// before the informer shows that write is not signed twice.
	writtenOver sync.Map
	// unwritten holds, per CSR UID, a certificate issued (and recorded)
	// over a resourceVersion whose status write failed: the retry writes
	// the same certificate instead of issuing and recording another each
	// time (a write rekey may not make, say, keeps failing).
	unwritten sync.Map
	// refused holds, per CSR UID, the NodeServing refusal last put into
	// an event: a CSR decided again says so once, not at each look.
	refused sync.Map
}

// issued is a certificate waiting for its status write.
type issued struct {
	resourceVersion string
	certificate     []byte
}

// NewController wires the controller to its informers (which the caller
// starts).
func NewController(deps Deps) *Controller {
	issuer.RegisterMetrics()
	c := &Controller{
		deps:    deps,
		csrs:    deps.CSRs.Lister(),
		signers: deps.Signers.Lister(),
		queue:   runner.NewQueue[string]("hostcsr"),
		synced:  []cache.InformerSynced{deps.CSRs.Informer().HasSynced, deps.Signers.Informer().HasSynced, deps.CAs.Informer().HasSynced},
	}
	_, _ = deps.CSRs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: c.forget,
	})
	// A Signer that starts serving the host cluster, or changes its mode
	// or policy, looks at its signer name's open CSRs again.
	_, _ = deps.Signers.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.signerChanged,
		UpdateFunc: func(_, obj any) { c.signerChanged(obj) },
	})
	// A CA that becomes able to sign unblocks the approved CSRs of its
	// Signers, which otherwise wait out their back-off.
	_, _ = deps.CAs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.caChanged,
		UpdateFunc: func(_, obj any) { c.caChanged(obj) },
	})
	return c
}

// Run approves and signs until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	runner.Run(ctx, "hostcsr", c.queue, c.synced, workers, func(ctx context.Context, name string) (time.Duration, error) {
		csr, err := c.csrs.Get(name)
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		return c.Handle(ctx, csr)
	})
}

// open says whether a CSR may still need rekey: not denied, not failed,
// no certificate.
func open(csr *certificatesv1.CertificateSigningRequest) bool {
	return len(csr.Status.Certificate) == 0 && !hasCondition(csr, certificatesv1.CertificateDenied) && !hasCondition(csr, certificatesv1.CertificateFailed)
}

func hasCondition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) bool {
	return condition(csr, t) != nil
}

func condition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequestCondition {
	for i := range csr.Status.Conditions {
		if c := &csr.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// signerFor returns the Signer that serves the host cluster's CSRs of
// signerName, or nil when none does (rekey then leaves the CSR alone).
func (c *Controller) signerFor(signerName string) (*certv1alpha1.Signer, error) {
	s, err := c.signers.Get(validation.SignerObjectName(signerName))
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !Serves(s) || s.Spec.SignerName != signerName {
		return nil, nil
	}
	return s, nil
}

// Serves says whether a Signer serves the host cluster's native CSRs.
// Attestation mode never does (validation refuses it: a native CSR
// carries no evidence), checked here too.
func Serves(s *certv1alpha1.Signer) bool {
	return s.Spec.HostCluster != nil && s.Spec.HostCluster.CertificateSigningRequests && s.Spec.Approval.Mode != certv1alpha1.ApprovalAttestation
}

func (c *Controller) enqueue(obj any) {
	csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
	if !ok || !open(csr) {
		return
	}
	if s, err := c.signerFor(csr.Spec.SignerName); err == nil && s != nil {
		c.queue.Add(csr.Name)
	}
}

// enqueueWhere queues the open CSRs that match.
func (c *Controller) enqueueWhere(match func(*certificatesv1.CertificateSigningRequest) bool) {
	csrs, err := c.csrs.List(labels.Everything())
	if err != nil {
		return
	}
	for _, csr := range csrs {
		if open(csr) && match(csr) {
			c.enqueue(csr)
		}
	}
}

func (c *Controller) signerChanged(obj any) {
	if s, ok := obj.(*certv1alpha1.Signer); ok && Serves(s) {
		c.enqueueWhere(func(csr *certificatesv1.CertificateSigningRequest) bool {
			return csr.Spec.SignerName == s.Spec.SignerName
		})
	}
}

func (c *Controller) caChanged(obj any) {
	ca, ok := obj.(*rotationv1alpha1.CertificateAuthority)
	if !ok {
		return
	}
	signers, err := c.signers.List(labels.Everything())
	if err != nil {
		return
	}
	names := map[string]bool{}
	for _, s := range signers {
		if Serves(s) && s.Spec.CertificateAuthorityRef.Name == ca.Name {
			names[s.Spec.SignerName] = true
		}
	}
	if len(names) > 0 {
		c.enqueueWhere(func(csr *certificatesv1.CertificateSigningRequest) bool {
			return names[csr.Spec.SignerName] && hasCondition(csr, certificatesv1.CertificateApproved)
		})
	}
}

func (c *Controller) forget(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok {
		c.writtenOver.Delete(csr.UID)
		c.unwritten.Delete(csr.UID)
		c.refused.Delete(csr.UID)
	}
}

// NodeServing refusals are decided again every servingRecheck while the
// CSR is younger than servingRecheckFor: rekey reads Nodes from a cache,
// and a kubelet asks for its serving certificate as soon as it has posted
// its addresses, which the cache may not show yet. Kube's own CSRs carry
// no watch on the Node, so a refusal is looked at again rather than left
// for a person at once.
const (
	servingRecheck    = 20 * time.Second
	servingRecheckFor = 10 * time.Minute
)

// Handle acts on one CSR: a pending one is approved when the Signer's mode
// approves without a person and the CSR passes; an approved one is signed
// under the Signer's policy, or Failed with the rule it broke. The CSR is
// the lister's copy and is not modified. A non-zero duration looks at the
// CSR again then.
func (c *Controller) Handle(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) (time.Duration, error) {
	signer, err := c.signerFor(csr.Spec.SignerName)
	if err != nil || signer == nil {
		return 0, err
	}
	if !open(csr) {
		return 0, nil
	}
	req := ToRekey(csr)
	if approved := condition(csr, certificatesv1.CertificateApproved); approved != nil {
		return 0, c.sign(ctx, signer, csr, req, approved.LastUpdateTime.Time)
	}
	return c.approve(ctx, signer, csr, req)
}

// approve approves a pending CSR when the Signer's mode decides without a
// person and the CSR passes. Otherwise it stays pending for a person
// (kubectl certificate approve or deny); a NodeServing refusal says why in
// an event. Nothing is ever denied.
func (c *Controller) approve(ctx context.Context, signer *certv1alpha1.Signer, csr *certificatesv1.CertificateSigningRequest, req *certv1alpha1.CertificateSigningRequest) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	var decision *issuer.Decision
	switch signer.Spec.Approval.Mode {
	case certv1alpha1.ApprovalNodeClient:
		var err error
		if decision, err = c.decideNodeClient(ctx, req); err != nil {
			return 0, err
		}
	case certv1alpha1.ApprovalNodeServing:
		var err error
		if c.deps.Cluster == nil {
			err = &issuer.NodeServingRefusal{Reason: "NodeServing approval reads Nodes from the host cluster, and rekey-apiserver cannot"}
		} else {
			decision, err = issuer.DecideNodeServing(c.deps.Cluster, signer, req)
		}
		var refusal *issuer.NodeServingRefusal
		if errors.As(err, &refusal) {
			if last, ok := c.refused.Swap(csr.UID, refusal.Reason); !ok || last != refusal.Reason {
				c.deps.Events.Event(reference(csr), corev1.EventTypeWarning, ReasonNotAutoApproved, message.CapEvent("Not approved automatically: "+refusal.Reason))
			}
			logger.V(2).Info("Not auto-approving", "csr", csr.Name, "reason", refusal.Reason)
			// Only a refusal that rests on the Node as read may change;
			// one about the request itself is final.
			if refusal.NodeDependent && c.deps.Clock.Since(csr.CreationTimestamp.Time) < servingRecheckFor {
				return servingRecheck, nil
			}
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
	}
	if decision == nil {
		logger.V(4).Info("Left for a person to approve", "csr", csr.Name, "signerName", csr.Spec.SignerName, "requester", csr.Spec.Username)
		return 0, nil
	}
	updated := csr.DeepCopy()
	now := metav1.NewTime(c.deps.Clock.Now())
	updated.Status.Conditions = append(updated.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: decision.Reason, Message: message.Cap(decision.Message),
		LastUpdateTime: now, LastTransitionTime: now,
	})
	_, err := c.deps.Kube.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, updated, metav1.UpdateOptions{FieldManager: approverFieldManager})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// Changed or gone: the informer brings what it is now.
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("approving CSR %s: %w", csr.Name, err)
	}
	logger.V(2).Info("Approved", "csr", csr.Name, "signerName", csr.Spec.SignerName, "reason", decision.Reason)
	c.deps.Events.Event(reference(csr), corev1.EventTypeNormal, ReasonApproved, message.CapEvent(decision.Reason+": "+decision.Message))
	return 0, nil
}

// decideNodeClient approves a CSR shaped like a node client certificate
// request (issuer.NodeClientSubresource) when a SubjectAccessReview says
// its requester may create certificatesigningrequests/<nodeclient or
// selfnodeclient> in group certificates.k8s.io: kube-controller-manager's
// question, so that the host cluster's existing bindings
// (system:certificates.k8s.io:certificatesigningrequests:nodeclient and
// :selfnodeclient) decide.
func (c *Controller) decideNodeClient(ctx context.Context, req *certv1alpha1.CertificateSigningRequest) (*issuer.Decision, error) {
	subresource, ok := issuer.NodeClientSubresource(req)
	if !ok {
		return nil, nil
	}
	allowed := func(subresource string) (bool, error) {
		decision, _, err := c.deps.Authorizer.Authorize(ctx, authorizer.AttributesRecord{
			User:            issuer.Requester(req), // as kube-apiserver recorded the creator
			Verb:            "create",
			APIGroup:        certificatesv1.GroupName,
			APIVersion:      "*",
			Resource:        "certificatesigningrequests",
			Subresource:     subresource,
			ResourceRequest: true,
		})
		if err != nil {
			return false, fmt.Errorf("SubjectAccessReview for CSR %s: %w", req.Name, err)
		}
		return decision == authorizer.DecisionAllow, nil
	}
	ok, err := allowed(subresource)
	if err == nil && !ok && subresource == issuer.SubresourceSelfNodeClient {
		// As kube-controller-manager's approver: one who may have any
		// node's client certificate may have its own.
		subresource = issuer.SubresourceNodeClient
		ok, err = allowed(subresource)
	}
	if err != nil || !ok {
		return nil, err
	}
	return &issuer.Decision{
		Reason:  issuer.ReasonAutoApproved,
		Message: fmt.Sprintf("Auto approving node client certificate after SubjectAccessReview (create certificates.k8s.io certificatesigningrequests/%s).", subresource),
	}, nil
}

// sign issues the certificate of an approved CSR, or fails it with the
// rule it broke. An error (the CA cannot sign now, the record could not
// be written) retries it with back-off.
func (c *Controller) sign(ctx context.Context, signer *certv1alpha1.Signer, csr *certificatesv1.CertificateSigningRequest, req *certv1alpha1.CertificateSigningRequest, approvedAt time.Time) error {
	if rv, ok := c.writtenOver.Load(csr.UID); ok && rv == csr.ResourceVersion {
		return nil
	}
	var signed authority.Signed
	if u, ok := c.unwritten.Load(csr.UID); ok && u.(issued).resourceVersion == csr.ResourceVersion {
		signed.Certificate = u.(issued).certificate
	} else {
		var err error
		if signed, err = c.deps.Signing.Sign(ctx, signer, req, approvedAt, authority.PathHostCluster); err != nil {
			return fmt.Errorf("signing CSR %s: %w", csr.Name, err)
		}
	}
	updated := csr.DeepCopy()
	if signed.Failure != nil {
		now := metav1.NewTime(c.deps.Clock.Now())
		updated.Status.Conditions = append(updated.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateFailed, Status: corev1.ConditionTrue, Reason: signed.Failure.Reason, Message: message.Cap(signed.Failure.Message),
			LastUpdateTime: now, LastTransitionTime: now,
		})
	} else {
		updated.Status.Certificate = signed.Certificate
	}
	_, err := c.deps.Kube.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: signerFieldManager})
	if err == nil {
		c.unwritten.Delete(csr.UID)
		c.writtenOver.Store(csr.UID, csr.ResourceVersion)
		klog.FromContext(ctx).V(2).Info("Wrote CSR status", "csr", csr.Name, "signerName", csr.Spec.SignerName, "issued", signed.Failure == nil)
		if signed.Failure != nil {
			c.deps.Events.Event(reference(csr), corev1.EventTypeWarning, ReasonFailed, message.CapEvent(signed.Failure.Reason+": "+signed.Failure.Message))
		} else {
			c.deps.Events.Event(reference(csr), corev1.EventTypeNormal, ReasonIssued, message.CapEvent(issuedMessage(signed.Certificate)))
		}
		return nil
	}
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// Someone else changed the CSR; the informer brings the new
		// version, and one with a certificate is left alone.
		c.unwritten.Delete(csr.UID)
		return nil
	}
	if signed.Failure == nil {
		c.unwritten.Store(csr.UID, issued{resourceVersion: csr.ResourceVersion, certificate: signed.Certificate})
	}
	return fmt.Errorf("writing the status of CSR %s: %w", csr.Name, err)
}

// ToRekey is the native CSR as the certificates.rekey.io request the
// shared decisions (issuer, authority) read: the same spec, with the name
// prefixed (RecordPrefix) so that its issuance record names the API it
// came from.
func ToRekey(csr *certificatesv1.CertificateSigningRequest) *certv1alpha1.CertificateSigningRequest {
	usages := make([]certv1alpha1.KeyUsage, len(csr.Spec.Usages))
	for i, u := range csr.Spec.Usages {
		usages[i] = certv1alpha1.KeyUsage(u)
	}
	var extra map[string]certv1alpha1.ExtraValue
	if len(csr.Spec.Extra) > 0 {
		extra = make(map[string]certv1alpha1.ExtraValue, len(csr.Spec.Extra))
		for k, v := range csr.Spec.Extra {
			extra[k] = certv1alpha1.ExtraValue(v)
		}
	}
	return &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: RecordPrefix + csr.Name, UID: csr.UID, ResourceVersion: csr.ResourceVersion},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request: csr.Spec.Request, SignerName: csr.Spec.SignerName, ExpirationSeconds: csr.Spec.ExpirationSeconds, Usages: usages,
			Username: csr.Spec.Username, UID: csr.Spec.UID, Groups: csr.Spec.Groups, Extra: extra,
		},
	}
}

// reference is what an event about a CSR names: kube's own kind (rekey's
// recorder scheme knows only rekey's types). A cluster-scoped object's
// events land in namespace default.
func reference(csr *certificatesv1.CertificateSigningRequest) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: certificatesv1.SchemeGroupVersion.String(), Kind: "CertificateSigningRequest",
		Name: csr.Name, UID: csr.UID, ResourceVersion: csr.ResourceVersion,
	}
}
