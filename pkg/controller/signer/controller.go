// Package signer signs approved requests for the signers declared by Signer
// objects, enforcing each signer's policy.
package signer

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	"rekey.io/rekey/pkg/controller/certificateauthority"
	"rekey.io/rekey/pkg/controller/csrutil"
	"rekey.io/rekey/pkg/controller/runner"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	certinformers "rekey.io/rekey/pkg/generated/informers/externalversions/certificates/v1alpha1"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/policy"
	"rekey.io/rekey/pkg/signing"
)

// Failed condition reasons.
const (
	ReasonPolicyViolation = "SignerPolicyViolation"
	ReasonInvalidRequest  = "InvalidRequest"
)

const signerKeyPrefix = "signer/"

// Controller signs approved requests.
type Controller struct {
	client      clientset.Interface
	csrs        certlisters.CertificateSigningRequestLister
	signers     certlisters.SignerLister
	synced      []cache.InformerSynced
	queue       workqueue.TypedRateLimitingInterface[string]
	authorities *certificateauthority.Authorities
	recorder    *issuance.Recorder
	clock       clock.PassiveClock
}

// NewController wires the controller to its informers.
func NewController(client clientset.Interface, csrInformer certinformers.CertificateSigningRequestInformer, signerInformer certinformers.SignerInformer,
	authorities *certificateauthority.Authorities, recorder *issuance.Recorder, clk clock.PassiveClock) *Controller {
	RegisterMetrics()
	c := &Controller{
		client:      client,
		csrs:        csrInformer.Lister(),
		signers:     signerInformer.Lister(),
		synced:      []cache.InformerSynced{csrInformer.Informer().HasSynced, signerInformer.Informer().HasSynced},
		queue:       runner.NewQueue[string]("signer"),
		authorities: authorities,
		recorder:    recorder,
		clock:       clk,
	}
	_, _ = csrInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueCSR,
		UpdateFunc: func(_, obj any) { c.enqueueCSR(obj) },
	})
	_, _ = signerInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueSigner,
		UpdateFunc: func(_, obj any) { c.enqueueSigner(obj) },
	})
	return c
}

func (c *Controller) enqueueCSR(obj any) {
	csr, ok := obj.(*certv1alpha1.CertificateSigningRequest)
	if ok && csrutil.NeedsSigning(csr) {
		c.queue.Add(csr.Name)
	}
}

func (c *Controller) enqueueSigner(obj any) {
	if s, ok := obj.(*certv1alpha1.Signer); ok {
		c.queue.Add(signerKeyPrefix + s.Name)
	}
}

// CAChanged re-checks the signers of a CA, and the requests that waited
// for it.
func (c *Controller) CAChanged(caName string) {
	signers, err := c.signers.List(everything)
	if err != nil {
		return
	}
	waiting := map[string]bool{}
	for _, s := range signers {
		if s.Spec.CertificateAuthorityRef.Name == caName {
			c.queue.Add(signerKeyPrefix + s.Name)
			waiting[s.Spec.SignerName] = true
		}
	}
	if len(waiting) == 0 {
		return
	}
	csrs, err := c.csrs.List(everything)
	if err != nil {
		return
	}
	for _, csr := range csrs {
		if waiting[csr.Spec.SignerName] && csrutil.NeedsSigning(csr) {
			c.queue.Add(csr.Name)
		}
	}
}

// Run signs until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	runner.Run(ctx, "signer", c.queue, c.synced, workers, func(ctx context.Context, key string) (time.Duration, error) {
		if name, ok := strings.CutPrefix(key, signerKeyPrefix); ok {
			return 0, c.syncSigner(ctx, name)
		}
		return 0, c.syncCSR(ctx, key)
	})
}

func (c *Controller) signerFor(signerName string) (*certv1alpha1.Signer, error) {
	return c.signers.Get(validation.SignerObjectName(signerName))
}

func (c *Controller) syncCSR(ctx context.Context, name string) error {
	csr, err := c.csrs.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !csrutil.NeedsSigning(csr) {
		return nil
	}
	signer, err := c.signerFor(csr.Spec.SignerName)
	if apierrors.IsNotFound(err) {
		// Not a signer rekey serves; another signer may.
		return nil
	}
	if err != nil {
		return err
	}
	signerName := csr.Spec.SignerName
	req, err := validation.ParseStoredCSR(csr.Spec.Request)
	if err != nil {
		requestsTotal.WithLabelValues(signerName, "failed").Inc()
		return c.fail(ctx, csr, ReasonInvalidRequest, err.Error())
	}
	decision, err := policy.Evaluate(&signer.Spec.Policy, &csr.Spec, req)
	var violation *policy.Violation
	if errors.As(err, &violation) {
		requestsTotal.WithLabelValues(signerName, "failed").Inc()
		signingErrors.WithLabelValues(signerName, "policy").Inc()
		reason := ReasonPolicyViolation
		if violation.Reason != "" {
			reason = violation.Reason
		}
		return c.fail(ctx, csr, reason, fmt.Sprintf("signer %s refused the request: %s", signerName, violation.Error()))
	}
	if err != nil {
		return err
	}
	auth, err := c.authorities.Get(ctx, signer.Spec.CertificateAuthorityRef.Name)
	if err != nil {
		signingErrors.WithLabelValues(signerName, "ca_unavailable").Inc()
		requestsTotal.WithLabelValues(signerName, "error").Inc()
		return fmt.Errorf("signer %s: %w", signerName, err)
	}
	now := c.clock.Now()
	certPEM, cert, err := signing.Issue(signing.Issuance{
		Request: req, KeyUsage: decision.KeyUsage, ExtKeyUsage: decision.ExtKeyUsage, Duration: decision.Duration, Now: now,
	}, auth.Cert, auth.Signer)
	if err != nil {
		signingErrors.WithLabelValues(signerName, "sign").Inc()
		requestsTotal.WithLabelValues(signerName, "error").Inc()
		return err
	}
	if c.recorder != nil {
		if err := c.recorder.Record(ctx, issuance.Record{
			Serial: fmt.Sprintf("%x", cert.SerialNumber), CSRName: csr.Name, CSRUID: string(csr.UID), Requester: csr.Spec.Username,
			SignerName: signerName, CAName: auth.Name, CAKeyID: auth.KeyID, NotBefore: cert.NotBefore, NotAfter: cert.NotAfter,
		}); err != nil {
			signingErrors.WithLabelValues(signerName, "record").Inc()
			return err
		}
	}
	updated := csr.DeepCopy()
	updated.Status.Certificate = certPEM
	if _, err := c.client.CertificatesV1alpha1().CertificateSigningRequests().UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: "rekey-signer"}); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Someone else changed the request; the informer brings the
			// new version, and an already-signed request is left alone.
			return nil
		}
		signingErrors.WithLabelValues(signerName, "update").Inc()
		return err
	}
	requestsTotal.WithLabelValues(signerName, "issued").Inc()
	requestedDuration.WithLabelValues(signerName).Observe(decision.Requested.Seconds())
	honoredDuration.WithLabelValues(signerName).Observe(cert.NotAfter.Sub(now).Seconds())
	if approved := csrutil.Condition(csr, certv1alpha1.CertificateApproved); approved != nil && !approved.LastUpdateTime.IsZero() {
		approvalToCertificate.WithLabelValues(signerName).Observe(now.Sub(approved.LastUpdateTime.Time).Seconds())
	}
	klog.FromContext(ctx).V(2).Info("Issued certificate", "csr", csr.Name, "signerName", signerName, "serial", fmt.Sprintf("%x", cert.SerialNumber), "notAfter", cert.NotAfter)
	return nil
}

func (c *Controller) fail(ctx context.Context, csr *certv1alpha1.CertificateSigningRequest, reason, message string) error {
	updated := csr.DeepCopy()
	now := metav1.NewTime(c.clock.Now())
	updated.Status.Conditions = append(updated.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
		Type: certv1alpha1.CertificateFailed, Status: metav1.ConditionTrue, Reason: reason, Message: message,
		LastUpdateTime: now, LastTransitionTime: now,
	})
	_, err := c.client.CertificatesV1alpha1().CertificateSigningRequests().UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: "rekey-signer"})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// syncSigner keeps the Signer's Ready condition: whether its CA can sign.
func (c *Controller) syncSigner(ctx context.Context, name string) error {
	s, err := c.signers.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	cond := metav1.Condition{Type: certv1alpha1.SignerReady, Status: metav1.ConditionTrue, Reason: "CAReady",
		Message: fmt.Sprintf("signing with CertificateAuthority %q", s.Spec.CertificateAuthorityRef.Name), ObservedGeneration: s.Generation}
	if _, err := c.authorities.Get(ctx, s.Spec.CertificateAuthorityRef.Name); err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "CAUnavailable", err.Error()
		// Look again soon: the CA may be on its way.
		c.queue.AddAfter(signerKeyPrefix+name, 5*time.Second)
	}
	if cur := apimeta.FindStatusCondition(s.Status.Conditions, certv1alpha1.SignerReady); cur != nil &&
		cur.Status == cond.Status && cur.Reason == cond.Reason && cur.Message == cond.Message && s.Status.ObservedGeneration == s.Generation {
		return nil
	}
	updated := s.DeepCopy()
	cond.LastTransitionTime = metav1.NewTime(c.clock.Now())
	apimeta.SetStatusCondition(&updated.Status.Conditions, cond)
	updated.Status.ObservedGeneration = s.Generation
	_, err = c.client.CertificatesV1alpha1().Signers().UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: "rekey-signer"})
	if apierrors.IsConflict(err) {
		c.queue.Add(signerKeyPrefix + name)
		return nil
	}
	return err
}
