// Package signer signs approved requests for the signers declared by Signer
// objects, enforcing each signer's policy, and keeps each Signer's Ready
// condition saying whether its CertificateAuthority can sign.
package signer

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/apis/message"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/controller/csrcontroller"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	certinformers "rekey.io/rekey/pkg/generated/informers/externalversions/certificates/v1alpha1"
	rotationinformers "rekey.io/rekey/pkg/generated/informers/externalversions/rotation/v1alpha1"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	"rekey.io/rekey/pkg/issuer"
	"rekey.io/rekey/pkg/runner"
)

// Controller signs approved requests (a csrcontroller loop calling Handle)
// and keeps each Signer's Ready condition (a loop over Signer names).
type Controller struct {
	client      clientset.Interface
	signers     certlisters.SignerLister
	authorities *authority.Authorities
	signing     *authority.Signing
	clock       clock.PassiveClock

	csrs         *csrcontroller.Controller
	signerQueue  workqueue.TypedRateLimitingInterface[string]
	signerSynced []cache.InformerSynced

	// writtenOver holds, per request UID, the resourceVersion this
	// controller last wrote a certificate (or failure) over, until the
	// request leaves the informer. A request enqueued again before the
	// informer shows that write (a CA change re-enqueues every waiting
	// request) is then not signed a second time only for the write to
	// conflict.
	writtenOver sync.Map
}

// NewController wires the controller to its informers. A change of a CA's
// certificate or readiness (seen on the CA informer) re-checks the Signers
// that use it and the requests that waited for them.
func NewController(client clientset.Interface, csrInformer certinformers.CertificateSigningRequestInformer, signerInformer certinformers.SignerInformer,
	caInformer rotationinformers.CertificateAuthorityInformer, auth *authority.Service, clk clock.PassiveClock) *Controller {
	RegisterMetrics()
	c := &Controller{
		client:      client,
		signers:     signerInformer.Lister(),
		authorities: auth.Authorities,
		signing:     auth.Signing,
		clock:       clk,
		signerQueue: runner.NewQueue[string]("signer-status"),
	}
	c.csrs = csrcontroller.New("signer", csrInformer, certv1alpha1.NeedsSigning, c.Handle)
	_, _ = csrInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: c.forget})
	// The workers wait for the handlers' registrations, not only the
	// informers: a registration has synced once its handler has been given
	// every object of the initial list, so nothing the first adds queue
	// arrives after the workers believe the start is over.
	signerHandler, _ := signerInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueSigner,
		UpdateFunc: func(oldObj, obj any) {
			c.enqueueSigner(obj)
			c.signerChanged(oldObj, obj)
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if s, ok := obj.(*certv1alpha1.Signer); ok {
				signerReady.DeleteLabelValues(s.Spec.SignerName)
			}
		},
	})
	caHandler, _ := caInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.caChanged(nil, obj) },
		UpdateFunc: c.caChanged,
		// A deleted CA signs nothing more: its signers turn Ready=False
		// now, not at the next resync.
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			c.caChanged(nil, obj)
		},
	})
	c.signerSynced = []cache.InformerSynced{signerInformer.Informer().HasSynced, caInformer.Informer().HasSynced}
	if signerHandler != nil && caHandler != nil {
		c.signerSynced = append(c.signerSynced, signerHandler.HasSynced, caHandler.HasSynced)
	}
	return c
}

func (c *Controller) enqueueSigner(obj any) {
	if s, ok := obj.(*certv1alpha1.Signer); ok {
		c.signerQueue.Add(s.Name)
	}
}

// caChanged re-checks the signers of a CA whose certificate or readiness
// changed, and the requests that waited for them.
func (c *Controller) caChanged(oldObj, newObj any) {
	ca, ok := newObj.(*rotationv1alpha1.CertificateAuthority)
	if !ok {
		return
	}
	if old, ok := oldObj.(*rotationv1alpha1.CertificateAuthority); ok && !caSigningStateChanged(old, ca) {
		return
	}
	signers, err := c.signers.List(everything)
	if err != nil {
		return
	}
	waiting := map[string]bool{}
	for _, s := range signers {
		if s.Spec.CertificateAuthorityRef.Name == ca.Name {
			c.signerQueue.Add(s.Name)
			waiting[s.Spec.SignerName] = true
		}
	}
	if len(waiting) > 0 {
		c.csrs.EnqueueMatching(func(csr *certv1alpha1.CertificateSigningRequest) bool { return waiting[csr.Spec.SignerName] })
	}
}

// caSigningStateChanged: what the signer depends on is the CA's
// certificate, its Ready condition and its rotation phase (the new key
// signs from Prepared).
func caSigningStateChanged(old, cur *rotationv1alpha1.CertificateAuthority) bool {
	fingerprint := func(ca *rotationv1alpha1.CertificateAuthority) string {
		if ca.Status.Current == nil {
			return ""
		}
		return ca.Status.Current.Fingerprint
	}
	ready := func(ca *rotationv1alpha1.CertificateAuthority) metav1.ConditionStatus {
		if c := apimeta.FindStatusCondition(ca.Status.Conditions, rotationv1alpha1.CertificateAuthorityReady); c != nil {
			return c.Status
		}
		return ""
	}
	return fingerprint(old) != fingerprint(cur) || ready(old) != ready(cur) || old.Status.Phase != cur.Status.Phase
}

// Run signs until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	statusDone := make(chan struct{})
	go func() {
		defer close(statusDone)
		runner.Run(ctx, "signer-status", c.signerQueue, c.signerSynced, 1, func(ctx context.Context, name string) (time.Duration, error) {
			return c.syncSigner(ctx, name)
		})
	}()
	c.csrs.Run(ctx, workers, c.signerSynced...)
	<-statusDone
	c.forgetAll()
}

// forgetAll drops the Ready series of every Signer this controller knows
// when it stops (the end of a leadership term): the next leader reports
// them, and a former leader's frozen values would keep an alert firing, or
// hide one.
func (c *Controller) forgetAll() {
	all, err := c.signers.List(everything)
	if err != nil {
		return
	}
	for _, s := range all {
		signerReady.DeleteLabelValues(s.Spec.SignerName)
	}
}

func (c *Controller) signerFor(signerName string) (*certv1alpha1.Signer, error) {
	return c.signers.Get(validation.SignerObjectName(signerName))
}

// Handle signs one approved request under its Signer's policy, or fails it
// with the rule it broke. Requests for signer names without a Signer are
// left to other signers.
func (c *Controller) Handle(ctx context.Context, csr *certv1alpha1.CertificateSigningRequest) error {
	signer, err := c.signerFor(csr.Spec.SignerName)
	if apierrors.IsNotFound(err) {
		// Not a signer rekey serves; another signer may.
		return nil
	}
	if err != nil {
		return err
	}
	if rv, ok := c.writtenOver.Load(csr.UID); ok && rv == csr.ResourceVersion {
		// Already written over this version: the informer has not caught
		// up with our write yet.
		return nil
	}
	approvedAt := time.Time{}
	if approved := certv1alpha1.GetCondition(csr, certv1alpha1.CertificateApproved); approved != nil {
		approvedAt = approved.LastUpdateTime.Time
	}
	outcome, err := c.signing.Sign(ctx, signer, csr, approvedAt, issuer.PathController)
	if err != nil {
		if why := c.waitingFor(signer); why != "" {
			// Not an error: the request waits, and the CA's change
			// (caChanged) or the Signer's (signerChanged) queues it again.
			// An error would log and retry with backoff for as long as the
			// CA is missing.
			klog.FromContext(ctx).V(2).Info("Approved request waits for its CertificateAuthority",
				"csr", klog.KObj(csr), "signerName", csr.Spec.SignerName, "why", why, "err", err)
			return nil
		}
		return err
	}
	updated := csr.DeepCopy()
	if outcome.Failure != nil {
		now := metav1.NewTime(c.clock.Now())
		updated.Status.Conditions = append(updated.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
			Type: certv1alpha1.CertificateFailed, Status: metav1.ConditionTrue, Reason: outcome.Failure.Reason, Message: message.Cap(outcome.Failure.Message),
			LastUpdateTime: now, LastTransitionTime: now,
		})
	} else {
		updated.Status.Certificate = outcome.Certificate
	}
	_, err = c.client.CertificatesV1alpha1().CertificateSigningRequests().UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: "rekey-signer"})
	if err == nil {
		c.writtenOver.Store(csr.UID, csr.ResourceVersion)
	}
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// Someone else changed the request; the informer brings the new
		// version, and an already-signed request is left alone.
		return nil
	}
	return err
}

// waitingFor says why the signer's CA cannot sign yet, or "" when it is
// there and Ready (a failure to sign is then an error).
func (c *Controller) waitingFor(signer *certv1alpha1.Signer) string {
	name := signer.Spec.CertificateAuthorityRef.Name
	ca, err := c.authorities.Lister.Get(name)
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("CertificateAuthority %q does not exist", name)
	}
	if err != nil {
		return ""
	}
	if ca.Spec.Purpose == rotationv1alpha1.PurposeServiceAccountTokens {
		return fmt.Sprintf("CertificateAuthority %q signs service-account tokens, not certificates", name)
	}
	if !apimeta.IsStatusConditionTrue(ca.Status.Conditions, rotationv1alpha1.CertificateAuthorityReady) {
		return fmt.Sprintf("CertificateAuthority %q is not Ready", name)
	}
	return ""
}

// signerChanged queues again the requests of a Signer whose spec changed
// (another CA, another policy): a request that waited for the old CA may
// be signed now.
func (c *Controller) signerChanged(oldObj, newObj any) {
	old, ok1 := oldObj.(*certv1alpha1.Signer)
	cur, ok2 := newObj.(*certv1alpha1.Signer)
	if !ok1 || !ok2 || old.Generation == cur.Generation {
		return
	}
	c.csrs.EnqueueMatching(func(csr *certv1alpha1.CertificateSigningRequest) bool {
		return csr.Spec.SignerName == cur.Spec.SignerName
	})
}

// forget drops what writtenOver holds for a request that left the
// informer (issued, failed, or deleted).
func (c *Controller) forget(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if csr, ok := obj.(*certv1alpha1.CertificateSigningRequest); ok {
		c.writtenOver.Delete(csr.UID)
	}
}

// ReasonCANotFound is the Ready=False reason of a Signer whose
// CertificateAuthority does not exist.
const ReasonCANotFound = "CANotFound"

// ReasonCANotForCertificates is the Ready=False reason of a Signer whose
// CertificateAuthority's key signs service-account tokens
// (spec.purpose ServiceAccountTokens), never certificates.
const ReasonCANotForCertificates = "CANotForCertificates"

// syncSigner keeps the Signer's Ready condition: whether its CA can sign.
// A signer whose CA cannot sign yet is looked at again soon.
func (c *Controller) syncSigner(ctx context.Context, name string) (time.Duration, error) {
	s, err := c.signers.Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return c.handleSigner(ctx, s)
}

func (c *Controller) handleSigner(ctx context.Context, s *certv1alpha1.Signer) (time.Duration, error) {
	recheck := time.Duration(0)
	cond := metav1.Condition{Type: certv1alpha1.SignerReady, Status: metav1.ConditionTrue, Reason: "CAReady",
		Message: fmt.Sprintf("signing with CertificateAuthority %q", s.Spec.CertificateAuthorityRef.Name), ObservedGeneration: s.Generation}
	if err := c.authorities.CheckIssuesCertificates(s.Spec.CertificateAuthorityRef.Name); err != nil {
		// The purpose is immutable: only another CA (the Signer's edit, or
		// the CA deleted and made again) changes this, and both requeue.
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonCANotForCertificates
		cond.Message = message.Cap(fmt.Sprintf("%v: approved requests for %s are not signed; point spec.certificateAuthorityRef at a CertificateAuthority with purpose Certificates",
			err, s.Spec.SignerName))
	} else if _, err := c.authorities.Get(ctx, s.Spec.CertificateAuthorityRef.Name); apierrors.IsNotFound(err) {
		// Deleted (or never made): approved requests wait, unsigned, until
		// a CertificateAuthority of that name exists and has a key. The
		// CA's add brings the signer back here; no recheck is needed.
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonCANotFound
		cond.Message = fmt.Sprintf("CertificateAuthority %q does not exist: approved requests for %s are not signed until it does", s.Spec.CertificateAuthorityRef.Name, s.Spec.SignerName)
	} else if err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "CAUnavailable", message.Cap(err.Error())
		// Look again soon: the CA may be on its way.
		recheck = 5 * time.Second
	}
	ready := 0.0
	if cond.Status == metav1.ConditionTrue {
		ready = 1
	}
	signerReady.WithLabelValues(s.Spec.SignerName).Set(ready)
	if cur := apimeta.FindStatusCondition(s.Status.Conditions, certv1alpha1.SignerReady); cur != nil &&
		cur.Status == cond.Status && cur.Reason == cond.Reason && cur.Message == cond.Message && s.Status.ObservedGeneration == s.Generation {
		return recheck, nil
	}
	updated := s.DeepCopy()
	cond.LastTransitionTime = metav1.NewTime(c.clock.Now())
	apimeta.SetStatusCondition(&updated.Status.Conditions, cond)
	updated.Status.ObservedGeneration = s.Generation
	_, err := c.client.CertificatesV1alpha1().Signers().UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: "rekey-signer"})
	if apierrors.IsConflict(err) {
		// The informer brings the newer version, which is synced again.
		return 0, nil
	}
	return recheck, err
}
