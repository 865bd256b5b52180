// Package publisher sends each CertificateAuthority's trust bundle to the
// host cluster, as its spec.publish asks: a ConfigMap (key ca.crt, the
// CRL of the CA's current key as binaryData ca.crl, and the CRLs of every
// key the bundle trusts as ca-crl.pem) in each chosen namespace, and a ClusterTrustBundle for each signer name whose
// Signer uses the CA; and removes what it published there once the CA no
// longer asks for it. It runs only when rekey has a host cluster.
package publisher

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	certificatesv1ac "k8s.io/client-go/applyconfigurations/certificates/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	kubeinformers "k8s.io/client-go/informers"
	kubecertinformers "k8s.io/client-go/informers/certificates/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/crl"
	certinformers "rekey.io/rekey/pkg/generated/informers/externalversions/certificates/v1alpha1"
	rotationinformers "rekey.io/rekey/pkg/generated/informers/externalversions/rotation/v1alpha1"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/runner"
	"rekey.io/rekey/pkg/trustpublish"
)

const (
	// BundleKey is the ConfigMap key of the bundle.
	BundleKey = "ca.crt"
	// CRLKey is the ConfigMap binaryData key of the CRL (DER) of the CA's
	// current key.
	CRLKey = "ca.crl"
	// CRLPEMKey is the ConfigMap data key of the CRLs (PEM, the current
	// key's first) of every key the CA has: during a rotation the bundle
	// trusts the previous key too, and a relying party that checks CRLs
	// needs that key's CRL to accept its certificates (one file, as
	// openssl -CRLfile and most TLS servers take them).
	CRLPEMKey = "ca-crl.pem"
	// MaxPublishedCRL is the most CRL bytes put into a ConfigMap (which
	// holds at most 1 MiB in all): ca.crl and ca-crl.pem together. When
	// they are larger both are left out, and relying parties fetch the
	// CRLs from rekey (/crl/<caName>, /crl/<caName>/<keyID>).
	MaxPublishedCRL = 512 << 10
	// crlPublishDelay is how long the publisher waits after a CRL was
	// issued before writing it: revocations in a burst are written to each
	// ConfigMap once. /crl/<caName> serves the newest at once.
	crlPublishDelay = 5 * time.Second
	// OwnerLabel marks what rekey wrote, and for which CA: rekey updates
	// only objects that carry it, never someone else's.
	OwnerLabel   = "rekey.io/certificate-authority"
	fieldManager = "rekey-publisher"
)

// Deps is what the publisher is built from.
type Deps struct {
	// Kube writes to the host cluster; give it the user agent UserAgent
	// (rest.AddUserAgent), so that its requests can be told apart.
	Kube kubernetes.Interface
	// CAs, Signers and Namespaces are shared informers, started by the
	// caller; Run adds its handlers and removes them when it returns.
	CAs        rotationinformers.CertificateAuthorityInformer
	Signers    certinformers.SignerInformer
	Namespaces coreinformers.NamespaceInformer
	// APIServices reads the host cluster's APIServices; with
	// OwnerAPIService, that APIService (rekey's
	// v1alpha1.rotation.rekey.io, watched by name) owns every bundle
	// published, so that uninstalling rekey lets the garbage collector
	// remove them. Nil or empty: no owner.
	APIServices     dynamic.Interface
	OwnerAPIService string
	// Published, when set, is told after each sync whether a CA's bundle
	// is now written everywhere its spec.publish says: a rotation's new
	// CA signs only once it is (trust before use).
	Published *trustpublish.Reporter
	// CRLs, when set, hands out each CA's CRLs (package crl) for the
	// ConfigMaps' ca.crl and ca-crl.pem. Nil: no CRL is published.
	CRLs CRLSource
}

// CRLSource is what the publisher needs of package crl's Manager.
type CRLSource interface {
	// Live returns the CRLs of the CA's keys: the current key's first,
	// then during a rotation the previous key's.
	Live(ctx context.Context, caName string) ([]*crl.CRL, error)
	// Subscribe calls fn with a CA's name after each CRL issued for it.
	Subscribe(fn func(caName string)) (remove func())
	// HasSynced says whether the CRLs can be issued (the revocations are
	// loaded).
	HasSynced() bool
}

// Concerns says whether the publisher writes a CA's bundle anywhere: the
// CAs whose rotation waits for it.
func Concerns(ca *rotationv1alpha1.CertificateAuthority) bool {
	p := ca.Spec.Publish
	return p != nil && (p.ConfigMaps != nil || p.ClusterTrustBundle)
}

// UserAgent is what the host cluster client of the publisher should add
// to its user agent (rest.AddUserAgent).
const UserAgent = "publisher"

// byCA indexes published objects by the CA their label names.
const byCA = "byCA"

// Controller publishes trust bundles. It reads what it published from
// informers on the objects carrying OwnerLabel (and nothing else), writes
// with server-side apply, and removes what a CA no longer asks for.
type Controller struct {
	kube       kubernetes.Interface
	caInformer rotationinformers.CertificateAuthorityInformer
	signerInf  certinformers.SignerInformer
	nsInformer coreinformers.NamespaceInformer
	cas        rotationlisters.CertificateAuthorityLister
	signers    certlisters.SignerLister
	namespaces corelisters.NamespaceLister

	// published watches the objects carrying OwnerLabel.
	published  kubeinformers.SharedInformerFactory
	configMaps cache.SharedIndexInformer
	// ctbs is not in the factory: Run starts it only when the host
	// cluster serves ClusterTrustBundles.
	ctbs cache.SharedIndexInformer
	// noCTBs is set by Run, before any sync, when the host cluster does
	// not serve ClusterTrustBundles: CAs that ask for one get an error,
	// and their ConfigMaps are still published.
	noCTBs bool
	// ownerInformer watches the owner APIService by name; nil for none.
	ownerInformer cache.SharedIndexInformer
	ownerName     string

	queue    workqueue.TypedRateLimitingInterface[string]
	reporter *trustpublish.Reporter
	crls     CRLSource
}

// New wires the publisher; Run starts its own informers (the published
// objects and the owner APIService).
func New(deps Deps) *Controller {
	labelled := func(o *metav1.ListOptions) { o.LabelSelector = OwnerLabel }
	ownerName := ""
	if deps.APIServices != nil {
		ownerName = deps.OwnerAPIService
	}
	trim := trimPublished(ownerName)
	published := kubeinformers.NewSharedInformerFactoryWithOptions(deps.Kube, 0,
		kubeinformers.WithTweakListOptions(labelled),
		kubeinformers.WithTransform(trim))
	ctbs := kubecertinformers.NewFilteredClusterTrustBundleInformer(deps.Kube, 0, cache.Indexers{}, labelled)
	// Not started yet: setting the transform cannot fail.
	_ = ctbs.SetTransform(trim)
	c := &Controller{
		kube:       deps.Kube,
		caInformer: deps.CAs,
		signerInf:  deps.Signers,
		nsInformer: deps.Namespaces,
		cas:        deps.CAs.Lister(),
		signers:    deps.Signers.Lister(),
		namespaces: deps.Namespaces.Lister(),
		published:  published,
		configMaps: published.Core().V1().ConfigMaps().Informer(),
		ctbs:       ctbs,
		queue:      runner.NewQueue[string]("publisher"),
		reporter:   deps.Published,
		crls:       deps.CRLs,
	}
	for _, inf := range []cache.SharedIndexInformer{c.configMaps, c.ctbs} {
		// Not started yet: adding an index cannot fail.
		_ = inf.AddIndexers(cache.Indexers{byCA: func(obj any) ([]string, error) {
			m, err := meta.Accessor(obj)
			if err != nil {
				return nil, nil
			}
			return []string{m.GetLabels()[OwnerLabel]}, nil
		}})
	}
	if deps.APIServices != nil && deps.OwnerAPIService != "" {
		selector := fields.OneTermEqualSelector("metadata.name", deps.OwnerAPIService).String()
		c.ownerName = deps.OwnerAPIService
		c.ownerInformer = dynamicinformer.NewFilteredDynamicInformer(deps.APIServices, apiServices, "", 0, cache.Indexers{},
			func(o *metav1.ListOptions) { o.FieldSelector = selector }).Informer()
	}
	return c
}

// DigestAnnotation is where the publisher's caches hold the digest of a
// published bundle. Only trimPublished writes it, in memory: it is never
// sent to the host cluster.
const DigestAnnotation = "rekey.io/bundle-digest"

// maxOwnerRefs is how many owner references naming the owner APIService
// the caches keep: at most one of them is the current owner, so two are
// enough to tell that an object lacks it or holds a stale one.
const maxOwnerRefs = 2

// trimPublished is the transform of the caches of published objects: it
// keeps only what the publisher reads, of a bounded size, since whoever
// may create labelled ConfigMaps in a namespace could otherwise fill
// rekey's memory with them (1 MiB each, kept by a finalizer). It keeps of
// the labels OwnerLabel alone, no finalizers (DeletionTimestamp says
// enough), no managed fields, only the owner references naming the owner
// APIService (ownerName; none without one), and of the bundle its digest
// in DigestAnnotation, every other annotation dropped.
//
// The transform may see an object it trimmed before (a resync, a
// relist): one without a bundle keeps the digest it holds. A digest that
// came from the host cluster so (an annotation on a ConfigMap without
// ca.crt) is kept too, but it cannot match: digests are keyed with a
// secret of the process.
func trimPublished(ownerName string) cache.TransformFunc {
	return func(obj any) (any, error) {
		m, ok := obj.(metav1.Object)
		if !ok {
			return obj, nil // a DeletedFinalStateUnknown holds a trimmed object
		}
		m.SetManagedFields(nil)
		m.SetFinalizers(nil)
		if owner, ok := m.GetLabels()[OwnerLabel]; ok {
			m.SetLabels(map[string]string{OwnerLabel: owner})
		} else {
			m.SetLabels(nil)
		}
		var refs []metav1.OwnerReference
		for _, r := range m.GetOwnerReferences() {
			if ownerName != "" && isAPIService(r) && r.Name == ownerName && len(refs) < maxOwnerRefs {
				refs = append(refs, r)
			}
		}
		m.SetOwnerReferences(refs)
		// What a trimmed object holds; nothing else of the host cluster's.
		kept := m.GetAnnotations()[DigestAnnotation]
		m.SetAnnotations(nil)
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			if bundle, ok := o.Data[BundleKey]; ok {
				kept = configMapDigest(bundle, publishedCRLs{der: o.BinaryData[CRLKey], pem: o.Data[CRLPEMKey]})
			} else if o.Data != nil || o.BinaryData != nil {
				kept = "" // from the host cluster, without a bundle
			}
			o.Data, o.BinaryData = nil, nil
		case *certificatesv1.ClusterTrustBundle:
			if o.Spec.TrustBundle != "" {
				kept = digest(o.Spec.TrustBundle)
			}
			o.Spec.TrustBundle = ""
		}
		if kept != "" {
			m.SetAnnotations(map[string]string{DigestAnnotation: kept})
		}
		return obj, nil
	}
}

// isAPIService reports whether r names an APIService.
func isAPIService(r metav1.OwnerReference) bool {
	gv, err := schema.ParseGroupVersion(r.APIVersion)
	return err == nil && gv.Group == apiServices.Group && r.Kind == "APIService"
}

// digestKey keys the digests of the caches: a digest the host cluster
// holds (a namespace editor wrote it) can never pass for one.
var digestKey = func() []byte {
	key := make([]byte, sha256.Size)
	_, _ = rand.Read(key) // never fails (it crashes the program instead)
	return key
}()

// digest is what the publisher's caches hold of a bundle: a fixed size,
// whatever the object holds.
func digest(bundle string) string {
	h := hmac.New(sha256.New, digestKey)
	h.Write([]byte(bundle))
	return "hmac-sha256:" + hex.EncodeToString(h.Sum(nil))
}

// crlDigestPrefix starts the digest of a ConfigMap that holds a CRL
// beside its bundle: the prefix alone says the cached object has one (to
// be removed when it should not).
const crlDigestPrefix = "hmac-sha256+crl:"

// publishedCRLs is what a ConfigMap holds of a CA's CRLs: ca.crl (DER,
// the current key's) and ca-crl.pem (every key's); none when both are
// empty.
type publishedCRLs struct {
	der []byte
	pem string
}

func (p publishedCRLs) empty() bool { return len(p.der) == 0 && p.pem == "" }

// size is what the CRLs add to a ConfigMap.
func (p publishedCRLs) size() int { return len(p.der) + len(p.pem) }

// configMapDigest is the digest of a ConfigMap's bundle and CRLs: the
// bundle's digest without a CRL, else one over all, each length first
// so that no other split of the same bytes matches.
func configMapDigest(bundle string, crls publishedCRLs) string {
	if crls.empty() {
		return digest(bundle)
	}
	h := hmac.New(sha256.New, digestKey)
	_, _ = fmt.Fprintf(h, "%d:", len(bundle))
	h.Write([]byte(bundle))
	_, _ = fmt.Fprintf(h, "%d:", len(crls.der))
	h.Write(crls.der)
	h.Write([]byte(crls.pem))
	return crlDigestPrefix + hex.EncodeToString(h.Sum(nil))
}

// cachedDigest is the digest of the bundle a cached object holds, "" for
// none.
func cachedDigest(obj metav1.Object) string {
	return obj.GetAnnotations()[DigestAnnotation]
}

// Run publishes until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	served, err := c.servesClusterTrustBundles(ctx)
	if err != nil {
		return // ctx ended
	}
	c.noCTBs = !served
	var regs []func()
	defer func() {
		for _, remove := range regs {
			remove()
		}
	}()
	var synced []cache.InformerSynced
	add := func(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) bool {
		reg, err := inf.AddEventHandler(h)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Adding the publisher's event handler")
			return false
		}
		regs = append(regs, func() { _ = inf.RemoveEventHandler(reg) })
		synced = append(synced, reg.HasSynced)
		return true
	}
	published := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueuePublished,
		UpdateFunc: func(old, obj any) { c.enqueuePublished(old); c.enqueuePublished(obj) },
		DeleteFunc: c.enqueuePublished,
	}
	ok := add(c.caInformer.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueCA,
		UpdateFunc: func(old, obj any) {
			c.enqueueCA(old)
			c.enqueueCA(obj)
		},
		// What it published goes with it.
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				c.queue.Add(key)
			}
		},
	}) && add(c.signerInf.Informer(), cache.ResourceEventHandlerFuncs{
		// A Signer for a CA needs its ClusterTrustBundle, one that left
		// the CA no longer.
		AddFunc:    c.enqueueSignerCA,
		UpdateFunc: func(old, obj any) { c.enqueueSignerCA(old); c.enqueueSignerCA(obj) },
		DeleteFunc: c.enqueueSignerCA,
	}) && add(c.nsInformer.Informer(), cache.ResourceEventHandlerFuncs{
		// Only what can change where a bundle goes: a namespace that
		// appears, or whose labels change.
		AddFunc:    func(obj any) { c.enqueueForNamespace(nil, obj) },
		UpdateFunc: c.namespaceUpdated,
	}) && add(c.configMaps, published) && (c.noCTBs || add(c.ctbs, published))
	if !ok {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	if !c.noCTBs {
		wg.Add(1)
		go func() { defer wg.Done(); c.ctbs.RunWithContext(ctx) }()
	}
	if c.ownerInformer != nil {
		// A new owner (rekey reinstalled) goes on everything published.
		if !add(c.ownerInformer, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.enqueueAll() },
			UpdateFunc: func(old, obj any) { c.enqueueIfUIDChanged(old, obj) },
			DeleteFunc: func(any) {},
		}) {
			return
		}
		wg.Add(1)
		go func() { defer wg.Done(); c.ownerInformer.RunWithContext(ctx) }()
	}
	if c.crls != nil {
		// A CA's new CRL goes into its ConfigMaps, a burst of them once.
		defer c.crls.Subscribe(func(caName string) { c.queue.AddAfter(caName, crlPublishDelay) })()
		synced = append(synced, c.crls.HasSynced)
	}
	c.published.Start(ctx.Done())
	defer c.published.Shutdown()
	runner.Run(ctx, "publisher", c.queue, synced, workers, c.sync)
}

// certificatesV1 is the group version of ClusterTrustBundles.
const certificatesV1 = "certificates.k8s.io/v1"

// errNoCTBs is the error of a CA that asks for a ClusterTrustBundle from a
// host cluster that has none.
var errNoCTBs = errors.New("the host cluster does not serve ClusterTrustBundles (" + certificatesV1 + ")")

// servesClusterTrustBundles asks the host cluster's discovery whether it
// serves ClusterTrustBundles (the API can be disabled): an informer on a
// resource that is not served never syncs, and would hold back every
// ConfigMap too. Discovery failures are retried until ctx ends (the only
// error).
func (c *Controller) servesClusterTrustBundles(ctx context.Context) (bool, error) {
	logger := klog.FromContext(ctx)
	var served bool
	err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: time.Second, Factor: 2, Steps: math.MaxInt32, Cap: time.Minute},
		func(context.Context) (bool, error) {
			resources, err := c.kube.Discovery().ServerResourcesForGroupVersion(certificatesV1)
			switch {
			case apierrors.IsNotFound(err):
				served = false
			case err != nil:
				logger.Error(err, "Asking the host cluster whether it serves ClusterTrustBundles; retrying")
				return false, nil
			default:
				served = slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "clustertrustbundles" })
			}
			if !served {
				logger.Info("The host cluster does not serve ClusterTrustBundles: CertificateAuthorities that ask for one get an error, their ConfigMaps are published", "groupVersion", certificatesV1)
			}
			return true, nil
		})
	return served, err
}

// namespaceUpdated queues the CAs a namespace's label change concerns;
// any other change (annotations, status, resync) concerns none.
func (c *Controller) namespaceUpdated(old, obj any) {
	o, ok1 := old.(*corev1.Namespace)
	n, ok2 := obj.(*corev1.Namespace)
	if ok1 && ok2 && !equality.Semantic.DeepEqual(o.Labels, n.Labels) {
		c.enqueueForNamespace(o, n)
	}
}

func (c *Controller) enqueueCA(obj any) {
	if ca, ok := obj.(*rotationv1alpha1.CertificateAuthority); ok && ca.Spec.Publish != nil {
		c.queue.Add(ca.Name)
	}
}

func (c *Controller) enqueueSignerCA(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if s, ok := obj.(*certv1alpha1.Signer); ok {
		c.queue.Add(s.Spec.CertificateAuthorityRef.Name)
	}
}

// enqueuePublished queues the CA a published object is labelled with.
func (c *Controller) enqueuePublished(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if m, err := meta.Accessor(obj); err == nil && m.GetLabels()[OwnerLabel] != "" {
		c.queue.Add(m.GetLabels()[OwnerLabel])
	}
}

// enqueueForNamespace queues the CAs that list the namespace or whose
// selector matches it (before or after a label change).
func (c *Controller) enqueueForNamespace(old, obj any) {
	var nss []*corev1.Namespace
	for _, o := range []any{old, obj} {
		if ns, ok := o.(*corev1.Namespace); ok {
			nss = append(nss, ns)
		}
	}
	if len(nss) == 0 {
		return
	}
	cas, err := c.cas.List(labels.Everything())
	if err != nil {
		return
	}
	for _, ca := range cas {
		if ca.Spec.Publish == nil || ca.Spec.Publish.ConfigMaps == nil {
			continue
		}
		p := ca.Spec.Publish.ConfigMaps
		for _, ns := range nss {
			if slices.Contains(p.Namespaces, ns.Name) {
				c.queue.Add(ca.Name)
				break
			}
			if p.NamespaceSelector == nil {
				continue
			}
			if sel, err := metav1.LabelSelectorAsSelector(p.NamespaceSelector); err == nil && sel.Matches(labels.Set(ns.Labels)) {
				c.queue.Add(ca.Name)
				break
			}
		}
	}
}

func (c *Controller) enqueueAll() {
	cas, err := c.cas.List(labels.Everything())
	if err != nil {
		return
	}
	for _, ca := range cas {
		c.enqueueCA(ca)
	}
}

func (c *Controller) enqueueIfUIDChanged(old, obj any) {
	o, err1 := meta.Accessor(old)
	n, err2 := meta.Accessor(obj)
	if err1 == nil && err2 == nil && o.GetUID() != n.GetUID() {
		c.enqueueAll()
	}
}

func (c *Controller) sync(ctx context.Context, name string) (time.Duration, error) {
	ca, err := c.cas.Get(name)
	if apierrors.IsNotFound(err) {
		if c.reporter != nil {
			c.reporter.Forget(name)
		}
		// Deleted: nothing of it stays published.
		return 0, c.removeStale(ctx, name, nil, nil)
	}
	if err != nil {
		return 0, err
	}
	err = c.Handle(ctx, ca)
	if c.reporter != nil && Concerns(ca) {
		var pe *PublishError
		switch {
		case err != nil && (!errors.As(err, &pe) || pe.Blocking):
			c.reporter.Failed(name, err)
		case ca.Status.TrustBundle != "":
			if err != nil {
				klog.FromContext(ctx).Info("Trust bundle published except where a namespace's own objects refuse it; a rotation does not wait for those", "ca", name, "err", err.Error())
			}
			c.reporter.Published(name, ca.Status.TrustBundle)
		}
	}
	return 0, err
}

// Handle writes a CA's bundle wherever its spec.publish says, and removes
// what it published before where it no longer says (namespace no longer
// selected, ConfigMaps or ClusterTrustBundles turned off, a Signer gone).
func (c *Controller) Handle(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority) error {
	p := ca.Spec.Publish
	if p != nil && ca.Status.TrustBundle == "" {
		return nil // nothing to publish yet; what was published stays
	}
	wantConfigMaps, wantCTBs := sets.New[string](), sets.New[string]()
	var owner *metav1.OwnerReference
	if p != nil && (p.ConfigMaps != nil || p.ClusterTrustBundle) {
		var err error
		if owner, err = c.owner(); err != nil {
			return err
		}
	}
	var errs []string
	// blocking: a failure that is not a namespace's own doing (see
	// PublishError); every failure below the ConfigMaps is.
	blocking := false
	if p != nil && p.ConfigMaps != nil {
		namespaces, err := c.targetNamespaces(p.ConfigMaps)
		if err != nil {
			return err
		}
		name := p.ConfigMaps.Name
		if name == "" {
			name = ca.Name
		}
		crls, err := c.publishedCRLs(ctx, ca)
		if err != nil {
			// The bundle is published without it: a CRL that cannot be
			// made (a key store down, a File CA whose certificate may
			// not sign CRLs) must not hold the trust a rotation waits
			// for. Retried with the sync.
			errs = append(errs, err.Error())
		}
		for _, ns := range namespaces {
			wantConfigMaps.Insert(ns + "/" + name)
			if err := c.ensureConfigMap(ctx, ns, name, ca, owner, crls); err != nil {
				errs = append(errs, err.Error())
				blocking = blocking || !namespaceLocal(err)
			}
		}
	}
	if p != nil && p.ClusterTrustBundle && c.noCTBs {
		errs = append(errs, errNoCTBs.Error())
		blocking = true
	}
	if p != nil && p.ClusterTrustBundle && !c.noCTBs {
		signers, err := c.signers.List(labels.Everything())
		if err != nil {
			return err
		}
		for _, s := range signers {
			if s.Spec.CertificateAuthorityRef.Name != ca.Name {
				continue
			}
			wantCTBs.Insert(ClusterTrustBundleName(s.Spec.SignerName, ca.Name))
			if err := c.ensureClusterTrustBundle(ctx, s.Spec.SignerName, ca, owner); err != nil {
				errs = append(errs, err.Error())
				blocking = true
			}
		}
	}
	if err := c.removeStale(ctx, ca.Name, wantConfigMaps, wantCTBs); err != nil {
		// What is left over holds an older bundle with the current CA in
		// it; it does not decide whether the new CA is published.
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return &PublishError{msg: fmt.Sprintf("publishing the trust bundle of %s: %s", ca.Name, strings.Join(errs, "; ")), Blocking: blocking}
	}
	return nil
}

// removeStale deletes what the cache shows published for the CA and not
// wanted any more. ConfigMaps in a namespace being deleted (or not seen)
// are left to the namespace's deletion.
func (c *Controller) removeStale(ctx context.Context, caName string, wantConfigMaps, wantCTBs sets.Set[string]) error {
	logger := klog.FromContext(ctx)
	var errs []string
	cms, err := c.configMaps.GetIndexer().ByIndex(byCA, caName)
	if err != nil {
		return err
	}
	for _, obj := range cms {
		cm, ok := obj.(*corev1.ConfigMap)
		// One being deleted is left alone: its update events (a
		// finalizer holds it) must not delete it again and again.
		if !ok || wantConfigMaps.Has(cm.Namespace+"/"+cm.Name) || cm.DeletionTimestamp != nil {
			continue
		}
		if ns, err := c.namespaces.Get(cm.Namespace); err != nil || ns.Status.Phase == corev1.NamespaceTerminating {
			continue
		}
		err := c.kube.CoreV1().ConfigMaps(cm.Namespace).Delete(ctx, cm.Name, cachedVersion(cm))
		if apierrors.IsNotFound(err) {
			continue // already gone; the cache has not caught up
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("removing ConfigMap %s/%s: %v", cm.Namespace, cm.Name, err))
			continue
		}
		logger.Info("Removed a published trust bundle no longer asked for", "ca", caName, "configMap", klog.KObj(cm))
	}
	var ctbs []any
	if !c.noCTBs {
		if ctbs, err = c.ctbs.GetIndexer().ByIndex(byCA, caName); err != nil {
			return err
		}
	}
	for _, obj := range ctbs {
		ctb, ok := obj.(*certificatesv1.ClusterTrustBundle)
		if !ok || wantCTBs.Has(ctb.Name) || ctb.DeletionTimestamp != nil {
			continue
		}
		err := c.kube.CertificatesV1().ClusterTrustBundles().Delete(ctx, ctb.Name, cachedVersion(ctb))
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("removing ClusterTrustBundle %s: %v", ctb.Name, err))
			continue
		}
		logger.Info("Removed a published trust bundle no longer asked for", "ca", caName, "clusterTrustBundle", ctb.Name)
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// cachedVersion deletes only the version the cache shows: one that changed
// since (its owner took rekey's label off to keep it, say) conflicts, and
// the sync that follows its event decides again.
func cachedVersion(obj metav1.Object) metav1.DeleteOptions {
	uid, rv := obj.GetUID(), obj.GetResourceVersion()
	return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}}
}

// targetNamespaces are the listed namespaces and those matching the
// selector, existing and not terminating.
func (c *Controller) targetNamespaces(p *rotationv1alpha1.ConfigMapPublish) ([]string, error) {
	want := sets.New(p.Namespaces...)
	if p.NamespaceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(p.NamespaceSelector)
		if err != nil {
			return nil, err
		}
		matching, err := c.namespaces.List(sel)
		if err != nil {
			return nil, err
		}
		for _, ns := range matching {
			want.Insert(ns.Name)
		}
	}
	var out []string
	for _, name := range sets.List(want) {
		ns, err := c.namespaces.Get(name)
		if err != nil || ns.Status.Phase == corev1.NamespaceTerminating {
			continue // published when it appears (namespace events re-queue)
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}

// owner is the owner reference of what is published: from the owner
// APIService's informer, nil while it does not exist.
func (c *Controller) owner() (*metav1.OwnerReference, error) {
	if c.ownerInformer == nil {
		return nil, nil
	}
	obj, exists, err := c.ownerInformer.GetStore().GetByKey(c.ownerName)
	if err != nil || !exists {
		return nil, err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	return &metav1.OwnerReference{APIVersion: "apiregistration.k8s.io/v1", Kind: "APIService", Name: m.GetName(), UID: m.GetUID()}, nil
}

// objectMeta is the metadata of a published object: rekey's label, and the
// owner when there is one.
func objectMeta(name, ns string, ca *rotationv1alpha1.CertificateAuthority, owner *metav1.OwnerReference) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{OwnerLabel: ca.Name}}
	if owner != nil {
		m.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return m
}

// lacksOwner reports whether an object rekey published before it had an
// owner (or before rekey was reinstalled) must get the current one.
func lacksOwner(refs []metav1.OwnerReference, owner *metav1.OwnerReference) bool {
	if owner == nil {
		return false
	}
	for _, r := range refs {
		if r.UID == owner.UID {
			return false
		}
	}
	return true
}

// staleOwner reports whether refs hold an earlier owner of the same kind
// and name (a reinstalled rekey).
func staleOwner(refs []metav1.OwnerReference, owner *metav1.OwnerReference) bool {
	if owner == nil {
		return false
	}
	for _, r := range refs {
		if r.Kind == owner.Kind && r.Name == owner.Name && r.APIVersion == owner.APIVersion && r.UID != owner.UID {
			return true
		}
	}
	return false
}

// ownerApply is the owner as an apply configuration (none without one).
func ownerApply(owner *metav1.OwnerReference) []*metav1ac.OwnerReferenceApplyConfiguration {
	if owner == nil {
		return nil
	}
	return []*metav1ac.OwnerReferenceApplyConfiguration{metav1ac.OwnerReference().
		WithAPIVersion(owner.APIVersion).WithKind(owner.Kind).WithName(owner.Name).WithUID(owner.UID)}
}

// replaceOwnerPatch is a strategic merge patch that swaps the earlier
// owners of the same kind and name (a reinstalled rekey) for the current
// one and sets fields, on the version the cache shows (a newer one
// conflicts, and the sync is retried from the cache): server-side apply
// cannot take an owner reference written by another manager (or by the
// create) away. Owner references merge by UID, so that the others, which
// the cache does not keep, stay as they are.
func replaceOwnerPatch(cached metav1.Object, owner *metav1.OwnerReference, fields map[string]any) ([]byte, error) {
	refs := []any{owner}
	for _, r := range cached.GetOwnerReferences() {
		if r.Kind == owner.Kind && r.Name == owner.Name && r.APIVersion == owner.APIVersion && r.UID != owner.UID {
			refs = append(refs, map[string]any{"uid": r.UID, "$patch": "delete"})
		}
	}
	patch := map[string]any{"metadata": map[string]any{
		"resourceVersion": cached.GetResourceVersion(),
		"ownerReferences": refs,
	}}
	for k, v := range fields {
		patch[k] = v
	}
	return json.Marshal(patch)
}

// notOurs is the error for an object of the name rekey would publish that
// it did not write for this CA.
func notOurs(kind, name, caName string) error {
	return fmt.Errorf("%s %s exists and was not written by rekey for %s (no label %s=%s, or not yet in rekey's cache); not overwritten: %w", kind, name, caName, OwnerLabel, caName, errNotOurs)
}

// errNotOurs marks notOurs errors.
var errNotOurs = errors.New("not rekey's object")

// PublishError is a publication that failed somewhere. Blocking is false
// when every failure is in a ConfigMap a namespace's own users control
// (one of the name rekey did not write, or one they made immutable): that
// namespace keeps the bundle it had, and the failure is reported, but a
// rotation does not wait for it, or any namespace editor could hold every
// rotation of the CA (its old key signing on) for as long as they like.
type PublishError struct {
	msg      string
	Blocking bool
}

func (e *PublishError) Error() string { return e.msg }

// errImmutable marks a ConfigMap rekey published that a namespace's user
// made immutable.
var errImmutable = errors.New("made immutable in its namespace")

// namespaceLocal says whether a ConfigMap write failed because of what a
// namespace's users did to the object, on positive evidence only (an
// object of the name seen not to be rekey's, or rekey's made immutable),
// not because rekey cannot write: any other failure, a refusal by a
// webhook or by validation included, holds the rotation.
func namespaceLocal(err error) bool {
	return errors.Is(err, errNotOurs) || errors.Is(err, errImmutable)
}

// publishedCRLs are the CRLs of the CA's keys for its ConfigMaps: none
// without a CRL source or when together they are larger than
// MaxPublishedCRL.
func (c *Controller) publishedCRLs(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority) (publishedCRLs, error) {
	if c.crls == nil {
		return publishedCRLs{}, nil
	}
	live, err := c.crls.Live(ctx, ca.Name)
	if err != nil {
		return publishedCRLs{}, fmt.Errorf("the CRLs are not published (ConfigMap keys %s, %s): %w", CRLKey, CRLPEMKey, err)
	}
	if len(live) == 0 {
		return publishedCRLs{}, nil
	}
	out := publishedCRLs{der: live[0].DER}
	var pemCRLs []byte
	for _, l := range live {
		pemCRLs = append(pemCRLs, pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: l.DER})...)
	}
	out.pem = string(pemCRLs)
	if out.size() > MaxPublishedCRL {
		klog.FromContext(ctx).V(2).Info("CRLs too large for the ConfigMaps; not published there, served at /crl/<caName>[/<keyID>]", "ca", ca.Name, "bytes", out.size(), "max", MaxPublishedCRL)
		return publishedCRLs{}, nil
	}
	return out, nil
}

// configMapData is the data of a ConfigMap holding bundle and crls.
func configMapData(bundle string, crls publishedCRLs) map[string]string {
	data := map[string]string{BundleKey: bundle}
	if crls.pem != "" {
		data[CRLPEMKey] = crls.pem
	}
	return data
}

// crlData is the binaryData of a ConfigMap holding crls, nil for none.
func crlData(crls publishedCRLs) map[string][]byte {
	if len(crls.der) == 0 {
		return nil
	}
	return map[string][]byte{CRLKey: crls.der}
}

// ensureConfigMap creates the ConfigMap if rekey's cache has none, and
// applies the bundle, the CRLs (none: empty) and owner to one rekey
// published when they differ.
func (c *Controller) ensureConfigMap(ctx context.Context, ns, name string, ca *rotationv1alpha1.CertificateAuthority, owner *metav1.OwnerReference, crls publishedCRLs) error {
	cms := c.kube.CoreV1().ConfigMaps(ns)
	obj, exists, err := c.configMaps.GetStore().GetByKey(ns + "/" + name)
	if err != nil {
		return err
	}
	if !exists {
		// Created, not applied: an apply would merge into a ConfigMap of
		// the same name that rekey did not write.
		_, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: objectMeta(name, ns, ca, owner),
			Data:       configMapData(ca.Status.TrustBundle, crls),
			BinaryData: crlData(crls),
		}, metav1.CreateOptions{FieldManager: fieldManager})
		if apierrors.IsAlreadyExists(err) {
			// The cache may just lag behind rekey's own create: only the
			// object itself says whose it is.
			live, getErr := cms.Get(ctx, name, metav1.GetOptions{})
			if getErr != nil {
				return fmt.Errorf("ConfigMap %s/%s exists and could not be read: %w", ns, name, getErr)
			}
			if live.Labels[OwnerLabel] == ca.Name {
				return fmt.Errorf("ConfigMap %s/%s is rekey's but not yet in its cache; retrying", ns, name)
			}
			return notOurs("ConfigMap", ns+"/"+name, ca.Name)
		}
		if err == nil {
			klog.FromContext(ctx).V(2).Info("Published trust bundle", "ca", ca.Name, "configMap", klog.KRef(ns, name))
		}
		return err
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return fmt.Errorf("ConfigMap %s/%s: unexpected %T in the cache", ns, name, obj)
	}
	if cm.Labels[OwnerLabel] != ca.Name {
		return notOurs("ConfigMap", ns+"/"+name, ca.Name)
	}
	if cachedDigest(cm) == configMapDigest(ca.Status.TrustBundle, crls) && !lacksOwner(cm.OwnerReferences, owner) && !staleOwner(cm.OwnerReferences, owner) {
		return nil
	}
	if cm.Immutable != nil && *cm.Immutable {
		return fmt.Errorf("ConfigMap %s/%s: %w; its data cannot change until someone there deletes it (rekey then publishes it again)", ns, name, errImmutable)
	}
	// CRLs the object holds and should not (grown too large, or not
	// made) go explicitly: the create that wrote them owns them under
	// another operation than the apply below, which leaving them out
	// would not remove.
	dropCRL := crls.empty() && strings.HasPrefix(cachedDigest(cm), crlDigestPrefix)
	if staleOwner(cm.OwnerReferences, owner) {
		data := map[string]any{BundleKey: ca.Status.TrustBundle}
		fields := map[string]any{"data": data}
		switch {
		case !crls.empty():
			data[CRLPEMKey] = crls.pem
			fields["binaryData"] = crlData(crls)
		case dropCRL:
			data[CRLPEMKey] = nil
			fields["binaryData"] = map[string]any{CRLKey: nil}
		}
		patch, err := replaceOwnerPatch(cm, owner, fields)
		if err != nil {
			return err
		}
		_, err = cms.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
		return err
	}
	// On the version the cache shows: a stale one conflicts, and the
	// sync is retried from the cache.
	apply := corev1ac.ConfigMap(name, ns).
		WithResourceVersion(cm.ResourceVersion).
		WithLabels(map[string]string{OwnerLabel: ca.Name}).
		WithOwnerReferences(ownerApply(owner)...).
		WithData(configMapData(ca.Status.TrustBundle, crls))
	if len(crls.der) > 0 {
		apply = apply.WithBinaryData(crlData(crls))
	}
	applied, err := cms.Apply(ctx, apply, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	if err != nil || !dropCRL {
		return err
	}
	_, hasDER := applied.BinaryData[CRLKey]
	_, hasPEM := applied.Data[CRLPEMKey]
	if !hasDER && !hasPEM {
		return nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata":   map[string]any{"resourceVersion": applied.ResourceVersion},
		"data":       map[string]any{CRLPEMKey: nil},
		"binaryData": map[string]any{CRLKey: nil},
	})
	if err != nil {
		return err
	}
	_, err = cms.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
	return err
}

// ClusterTrustBundleName is the name of the ClusterTrustBundle of a CA for
// a signer name: kube-apiserver requires the signer name (with '/' as ':')
// as prefix.
func ClusterTrustBundleName(signerName, caName string) string {
	return strings.ReplaceAll(signerName, "/", ":") + ":" + caName
}

// ensureClusterTrustBundle creates the ClusterTrustBundle if rekey's cache
// has none, and applies the bundle and owner to one rekey published when
// they differ.
func (c *Controller) ensureClusterTrustBundle(ctx context.Context, signerName string, ca *rotationv1alpha1.CertificateAuthority, owner *metav1.OwnerReference) error {
	ctbs := c.kube.CertificatesV1().ClusterTrustBundles()
	name := ClusterTrustBundleName(signerName, ca.Name)
	obj, exists, err := c.ctbs.GetStore().GetByKey(name)
	if err != nil {
		return err
	}
	if !exists {
		_, err = ctbs.Create(ctx, &certificatesv1.ClusterTrustBundle{
			ObjectMeta: objectMeta(name, "", ca, owner),
			Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: signerName, TrustBundle: ca.Status.TrustBundle},
		}, metav1.CreateOptions{FieldManager: fieldManager})
		if apierrors.IsAlreadyExists(err) {
			return notOurs("ClusterTrustBundle", name, ca.Name)
		}
		return err
	}
	ctb, ok := obj.(*certificatesv1.ClusterTrustBundle)
	if !ok {
		return fmt.Errorf("ClusterTrustBundle %s: unexpected %T in the cache", name, obj)
	}
	if ctb.Labels[OwnerLabel] != ca.Name {
		return notOurs("ClusterTrustBundle", name, ca.Name)
	}
	if cachedDigest(ctb) == digest(ca.Status.TrustBundle) && !lacksOwner(ctb.OwnerReferences, owner) && !staleOwner(ctb.OwnerReferences, owner) {
		return nil
	}
	if staleOwner(ctb.OwnerReferences, owner) {
		patch, err := replaceOwnerPatch(ctb, owner, map[string]any{"spec": map[string]string{"trustBundle": ca.Status.TrustBundle}})
		if err != nil {
			return err
		}
		_, err = ctbs.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
		return err
	}
	_, err = ctbs.Apply(ctx, certificatesv1ac.ClusterTrustBundle(name).
		WithResourceVersion(ctb.ResourceVersion).
		WithLabels(map[string]string{OwnerLabel: ca.Name}).
		WithOwnerReferences(ownerApply(owner)...).
		WithSpec(certificatesv1ac.ClusterTrustBundleSpec().WithSignerName(signerName).WithTrustBundle(ca.Status.TrustBundle)),
		metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	return err
}

// apiServices is the resource of the APIService that owns what is
// published.
var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
