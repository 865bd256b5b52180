// Package podcert issues the host cluster's certificates.k8s.io/v1
// PodCertificateRequests for the Signers that serve them
// (spec.hostCluster.podCertificateRequests). It runs on the leader, with a
// host cluster only.
//
// For each such Signer it runs one informer on the requests of its signer
// name (field selector spec.signerName), started and stopped as Signers
// come and go. A request that is not yet Issued, Denied or Failed is
// checked against the live Pod, ServiceAccount and Node it names (read
// from kube-apiserver, not a cache: a pod deleted and recreated under the
// same name must not get the old one's certificate), then against the
// Signer's PodCertificatePolicy, and issued through authority.Signing
// under the Signer's spec.policy with its CA, recorded like every
// certificate rekey issues. The outcome is written through the request's
// status subresource:
//
//   - Issued: certificateChain (the leaf, and the CA's certificate when it
//     is not self-signed), notBefore, beginRefreshAt, notAfter.
//   - Denied, reason IdentityMismatch: the pod, its service account or its
//     node does not exist or is not the one the request names (UIDs, the
//     pod's node and service account), or the pod is being deleted.
//   - Denied, reason NotAllowed: the policy's allowed list does not name
//     the pod's namespace and service account.
//   - Denied, reason InvalidUnverifiedUserAnnotations: the request carries
//     unverifiedUserAnnotations; rekey interprets none, and a certificate
//     that silently ignored what the pod asked for would mislead.
//   - Denied, reason UnsupportedKeyType: the key is not among keyTypes.
//   - Failed, reason InvalidTemplate: a commonName or dnsNames template
//     expands to an invalid name for this pod.
//   - Failed, reason InvalidRequest: the stub PKCS#10 request does not
//     parse or its signature does not verify (kube-apiserver checks it too).
//   - Failed with authority's reasons: SignerPolicyViolation (and the
//     policy's own, such as WeakPublicKey) when spec.policy refuses the
//     certificate, LifetimeTooShort when it would live under an hour.
package podcert

import (
	"context"
	"fmt"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	certinformersv1 "k8s.io/client-go/informers/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/authority"
	certinformers "rekey.io/rekey/pkg/generated/informers/externalversions/certificates/v1alpha1"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
)

// FieldManager is the field manager of rekey's status writes.
const FieldManager = "rekey-podcert"

// key names one request in the informer of its signer name.
type key struct {
	signerName, namespace, name string
}

// Controller issues PodCertificateRequests.
type Controller struct {
	kube         kubernetes.Interface
	signers      certlisters.SignerLister
	signerSynced cache.InformerSynced
	signing      *authority.Signing
	clock        clock.PassiveClock
	transform    cache.TransformFunc
	queue        workqueue.TypedRateLimitingInterface[key]

	mu       sync.Mutex
	ctx      context.Context // nil until Run
	bySigner map[string]*signerRequests

	// writtenOver holds, per request UID, the resourceVersion this
	// controller last wrote a status over, until the informer shows the
	// request finished or gone: a requeue of that stale copy (a Signer
	// change, a resync) must not issue and record a second certificate.
	writtenOver sync.Map
}

type signerRequests struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc // nil until started
}

// New wires the controller. kube reaches the host cluster with rekey's
// identity (it needs list/watch on podcertificaterequests, update on their
// status, get on pods, serviceaccounts and nodes, and sign on the signer
// names); transform (may be nil) trims the requests it caches.
func New(kube kubernetes.Interface, signerInformer certinformers.SignerInformer, signing *authority.Signing, clk clock.PassiveClock, transform cache.TransformFunc) *Controller {
	c := &Controller{
		kube:         kube,
		signers:      signerInformer.Lister(),
		signerSynced: signerInformer.Informer().HasSynced,
		signing:      signing,
		clock:        clk,
		transform:    transform,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[key](),
			workqueue.TypedRateLimitingQueueConfig[key]{Name: "podcert"}),
		bySigner: map[string]*signerRequests{},
	}
	_, _ = signerInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.signerChanged,
		UpdateFunc: func(_, obj any) { c.signerChanged(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if s, ok := obj.(*certv1alpha1.Signer); ok {
				c.unwatch(s.Spec.SignerName)
			}
		},
	})
	return c
}

// Serves says whether a Signer serves the host cluster's
// PodCertificateRequests.
func Serves(s *certv1alpha1.Signer) bool {
	return s.Spec.HostCluster != nil && s.Spec.HostCluster.PodCertificateRequests != nil
}

func (c *Controller) signerChanged(obj any) {
	s, ok := obj.(*certv1alpha1.Signer)
	if !ok {
		return
	}
	if !Serves(s) {
		c.unwatch(s.Spec.SignerName)
		return
	}
	if !c.watch(s.Spec.SignerName) {
		// A changed policy or CA may decide what waits (a request whose
		// CA could not sign): look at them again.
		c.enqueueSigner(s.Spec.SignerName)
	}
}

// watch starts caching the requests of signerName; false when they are
// cached already.
func (c *Controller) watch(signerName string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.bySigner[signerName]; ok {
		return false
	}
	selector := fields.OneTermEqualSelector("spec.signerName", signerName).String()
	informer := certinformersv1.NewFilteredPodCertificateRequestInformer(c.kube, metav1.NamespaceAll, 10*time.Minute, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = selector })
	if c.transform != nil {
		_ = informer.SetTransform(c.transform)
	}
	enqueue := func(obj any) {
		pcr, ok := obj.(*certificatesv1.PodCertificateRequest)
		// The server filters by signer name; this is for one (or a fake)
		// that would not.
		if !ok || pcr.Spec.SignerName != signerName {
			return
		}
		if Finished(pcr) {
			c.writtenOver.Delete(pcr.UID)
			return
		}
		c.queue.Add(key{signerName: signerName, namespace: pcr.Namespace, name: pcr.Name})
	}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pcr, ok := obj.(*certificatesv1.PodCertificateRequest); ok {
				c.writtenOver.Delete(pcr.UID)
			}
		},
	})
	r := &signerRequests{informer: informer}
	c.bySigner[signerName] = r
	if c.ctx != nil {
		c.start(r)
	}
	return true
}

func (c *Controller) unwatch(signerName string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.bySigner[signerName]; ok {
		if r.stop != nil {
			r.stop()
		}
		delete(c.bySigner, signerName)
	}
}

// start runs an informer until it is unwatched or the controller stops;
// c.mu is held.
func (c *Controller) start(r *signerRequests) {
	ctx, cancel := context.WithCancel(c.ctx)
	r.stop = cancel
	go r.informer.RunWithContext(ctx)
}

func (c *Controller) enqueueSigner(signerName string) {
	c.mu.Lock()
	r, ok := c.bySigner[signerName]
	c.mu.Unlock()
	if !ok {
		return
	}
	for _, obj := range r.informer.GetStore().List() {
		if pcr, ok := obj.(*certificatesv1.PodCertificateRequest); ok && !Finished(pcr) {
			c.queue.Add(key{signerName: signerName, namespace: pcr.Namespace, name: pcr.Name})
		}
	}
}

// cached returns a request from its signer's informer.
func (c *Controller) cached(k key) (*certificatesv1.PodCertificateRequest, bool) {
	c.mu.Lock()
	r, ok := c.bySigner[k.signerName]
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	obj, ok, _ := r.informer.GetStore().GetByKey(k.namespace + "/" + k.name)
	if !ok {
		return nil, false
	}
	pcr, ok := obj.(*certificatesv1.PodCertificateRequest)
	return pcr, ok
}

// Run issues with workers until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx).WithName("podcert")
	ctx = klog.NewContext(ctx, logger)
	c.mu.Lock()
	c.ctx = ctx
	for _, r := range c.bySigner {
		c.start(r)
	}
	c.mu.Unlock()
	defer c.queue.ShutDown()
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.signerSynced) {
		return
	}
	logger.Info("Starting PodCertificateRequest workers", "workers", workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, c.worker, time.Second)
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
}

func (c *Controller) worker(ctx context.Context) {
	for c.next(ctx) {
	}
}

func (c *Controller) next(ctx context.Context) bool {
	k, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(k)
	pcr, ok := c.cached(k)
	if !ok {
		c.queue.Forget(k)
		return true
	}
	if err := c.Handle(ctx, pcr); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Handling PodCertificateRequest", "podCertificateRequest", klog.KObj(pcr), "signerName", k.signerName)
		c.queue.AddRateLimited(k)
		return true
	}
	c.queue.Forget(k)
	return true
}

// Finished says whether a request is Issued, Denied or Failed: its status
// can no longer change.
func Finished(pcr *certificatesv1.PodCertificateRequest) bool {
	for _, cond := range pcr.Status.Conditions {
		switch cond.Type {
		case certificatesv1.PodCertificateRequestConditionTypeIssued, certificatesv1.PodCertificateRequestConditionTypeDenied,
			certificatesv1.PodCertificateRequestConditionTypeFailed:
			if cond.Status == metav1.ConditionTrue {
				return true
			}
		}
	}
	return false
}

// Handle decides one request and writes the outcome. An error means
// nothing was decided: try again later.
func (c *Controller) Handle(ctx context.Context, pcr *certificatesv1.PodCertificateRequest) error {
	if Finished(pcr) {
		return nil
	}
	if rv, ok := c.writtenOver.Load(pcr.UID); ok && rv == pcr.ResourceVersion {
		// Decided already; the informer has not caught up.
		return nil
	}
	signer, err := c.signers.Get(validation.SignerObjectName(pcr.Spec.SignerName))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !Serves(signer) || signer.Spec.SignerName != pcr.Spec.SignerName {
		// Never act for a signer name no Signer serves.
		return nil
	}
	out, err := c.decide(ctx, signer, pcr)
	if err != nil {
		return err
	}
	return c.write(ctx, pcr, out)
}

// write records the outcome through the status subresource.
func (c *Controller) write(ctx context.Context, pcr *certificatesv1.PodCertificateRequest, out *outcome) error {
	updated := pcr.DeepCopy()
	updated.Status = out.status
	updated.Status.Conditions = []metav1.Condition{{
		Type: out.conditionType, Status: metav1.ConditionTrue, Reason: out.reason, Message: out.message,
		ObservedGeneration: pcr.Generation, LastTransitionTime: metav1.NewTime(c.clock.Now()),
	}}
	_, err := c.kube.CertificatesV1().PodCertificateRequests(pcr.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: FieldManager})
	switch {
	case apierrors.IsNotFound(err):
		// Deleted meanwhile (its pod went away, or the cleaner took it).
		return nil
	case apierrors.IsConflict(err):
		// Someone else decided, or the request changed: the informer
		// brings the new version, which is looked at again if unfinished.
		return nil
	case apierrors.IsInvalid(err) && out.conditionType == certificatesv1.PodCertificateRequestConditionTypeIssued:
		// kube-apiserver refused the certificate (its clock far from
		// rekey's, say). Issuing again would be refused again, each time
		// with a new recorded certificate: the request fails instead.
		return c.write(ctx, pcr, failed(ReasonIssuanceRefused, "kube-apiserver refused the issued certificate: %v", err))
	case err != nil:
		return fmt.Errorf("writing the status of PodCertificateRequest %s/%s: %w", pcr.Namespace, pcr.Name, err)
	}
	c.writtenOver.Store(pcr.UID, pcr.ResourceVersion)
	klog.FromContext(ctx).V(2).Info("Decided PodCertificateRequest", "podCertificateRequest", klog.KObj(pcr), "signerName", pcr.Spec.SignerName,
		"condition", out.conditionType, "reason", out.reason)
	return nil
}
