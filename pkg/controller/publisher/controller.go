// Package publisher sends each CertificateAuthority's trust bundle to the
// host cluster, as its spec.publish asks: a ConfigMap (key ca.crt) in each
// chosen namespace, and a ClusterTrustBundle for each signer name whose
// Signer uses the CA. It runs only when rekey has a host cluster.
package publisher

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	certinformers "rekey.io/rekey/pkg/generated/informers/externalversions/certificates/v1alpha1"
	rotationinformers "rekey.io/rekey/pkg/generated/informers/externalversions/rotation/v1alpha1"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/runner"
)

const (
	// BundleKey is the ConfigMap key of the bundle.
	BundleKey = "ca.crt"
	// OwnerLabel marks what rekey wrote, and for which CA: rekey updates
	// only objects that carry it, never someone else's.
	OwnerLabel   = "rekey.io/certificate-authority"
	fieldManager = "rekey-publisher"
)

// Owner returns the owner reference of what the publisher writes, nil for
// none. rekey installed in a cluster points it at its APIService
// v1alpha1.rotation.rekey.io, so that uninstalling rekey (deleting the
// APIService) lets the garbage collector remove every bundle it published.
type Owner func(ctx context.Context) (*metav1.OwnerReference, error)

// Controller publishes trust bundles.
type Controller struct {
	// Owner, when set, owns every ConfigMap and ClusterTrustBundle written.
	Owner Owner

	kube       kubernetes.Interface
	cas        rotationlisters.CertificateAuthorityLister
	signers    certlisters.SignerLister
	namespaces corelisters.NamespaceLister
	synced     []cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[string]
}

// NewController wires the publisher to rekey's and the host cluster's informers.
func NewController(kube kubernetes.Interface, caInformer rotationinformers.CertificateAuthorityInformer, signerInformer certinformers.SignerInformer, nsInformer coreinformers.NamespaceInformer) *Controller {
	c := &Controller{
		kube:       kube,
		cas:        caInformer.Lister(),
		signers:    signerInformer.Lister(),
		namespaces: nsInformer.Lister(),
		synced:     []cache.InformerSynced{caInformer.Informer().HasSynced, signerInformer.Informer().HasSynced, nsInformer.Informer().HasSynced},
		queue:      runner.NewQueue[string]("publisher"),
	}
	_, _ = caInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueCA,
		UpdateFunc: func(_, obj any) { c.enqueueCA(obj) },
	})
	// A new Signer for a CA, or a namespace that starts matching a
	// selector, needs the bundle too.
	_, _ = signerInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if s, ok := obj.(*certv1alpha1.Signer); ok {
				c.queue.Add(s.Spec.CertificateAuthorityRef.Name)
			}
		},
	})
	_, _ = nsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.enqueueAll() },
		UpdateFunc: func(_, _ any) { c.enqueueAll() },
	})
	return c
}

func (c *Controller) enqueueCA(obj any) {
	if ca, ok := obj.(*rotationv1alpha1.CertificateAuthority); ok && ca.Spec.Publish != nil {
		c.queue.Add(ca.Name)
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

// Run publishes until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	runner.Run(ctx, "publisher", c.queue, c.synced, workers, func(ctx context.Context, name string) (time.Duration, error) {
		ca, err := c.cas.Get(name)
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		return 0, c.Handle(ctx, ca)
	})
}

// Handle writes a CA's bundle wherever its spec.publish says.
func (c *Controller) Handle(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority) error {
	p := ca.Spec.Publish
	if p == nil || ca.Status.TrustBundle == "" {
		return nil
	}
	owner, err := c.owner(ctx)
	if err != nil {
		return err
	}
	var errs []string
	if p.ConfigMaps != nil {
		namespaces, err := c.targetNamespaces(p.ConfigMaps)
		if err != nil {
			return err
		}
		name := p.ConfigMaps.Name
		if name == "" {
			name = ca.Name
		}
		for _, ns := range namespaces {
			if err := c.ensureConfigMap(ctx, ns, name, ca, owner); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if p.ClusterTrustBundle {
		signers, err := c.signers.List(labels.Everything())
		if err != nil {
			return err
		}
		for _, s := range signers {
			if s.Spec.CertificateAuthorityRef.Name != ca.Name {
				continue
			}
			if err := c.ensureClusterTrustBundle(ctx, s.Spec.SignerName, ca, owner); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("publishing the trust bundle of %s: %s", ca.Name, strings.Join(errs, "; "))
	}
	return nil
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

func (c *Controller) owner(ctx context.Context) (*metav1.OwnerReference, error) {
	if c.Owner == nil {
		return nil, nil
	}
	owner, err := c.Owner(ctx)
	if err != nil {
		return nil, fmt.Errorf("finding the owner of published trust bundles: %w", err)
	}
	return owner, nil
}

// meta is the metadata of a published object: rekey's label, and the
// owner when there is one.
func meta(name, ns string, ca *rotationv1alpha1.CertificateAuthority, owner *metav1.OwnerReference) metav1.ObjectMeta {
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

// withOwner replaces the owner references of an earlier owner of the same
// kind and name (a reinstalled rekey) with the current one.
func withOwner(refs []metav1.OwnerReference, owner *metav1.OwnerReference) []metav1.OwnerReference {
	out := []metav1.OwnerReference{*owner}
	for _, r := range refs {
		if r.Kind != owner.Kind || r.Name != owner.Name || r.APIVersion != owner.APIVersion {
			out = append(out, r)
		}
	}
	return out
}

func (c *Controller) ensureConfigMap(ctx context.Context, ns, name string, ca *rotationv1alpha1.CertificateAuthority, owner *metav1.OwnerReference) error {
	cms := c.kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: meta(name, ns, ca, owner),
			Data:       map[string]string{BundleKey: ca.Status.TrustBundle},
		}, metav1.CreateOptions{FieldManager: fieldManager})
		if err == nil {
			klog.FromContext(ctx).V(2).Info("Published trust bundle", "ca", ca.Name, "configMap", klog.KRef(ns, name))
		}
		return err
	}
	if err != nil {
		return err
	}
	if cm.Labels[OwnerLabel] != ca.Name {
		return fmt.Errorf("ConfigMap %s/%s exists and was not written by rekey for %s (no label %s=%s); not overwritten", ns, name, ca.Name, OwnerLabel, ca.Name)
	}
	if cm.Data[BundleKey] == ca.Status.TrustBundle && !lacksOwner(cm.OwnerReferences, owner) {
		return nil
	}
	updated := cm.DeepCopy()
	if lacksOwner(updated.OwnerReferences, owner) {
		updated.OwnerReferences = withOwner(updated.OwnerReferences, owner)
	}
	if updated.Data == nil {
		updated.Data = map[string]string{}
	}
	updated.Data[BundleKey] = ca.Status.TrustBundle
	_, err = cms.Update(ctx, updated, metav1.UpdateOptions{FieldManager: fieldManager})
	return err
}

// ClusterTrustBundleName is the name of the ClusterTrustBundle of a CA for
// a signer name: kube-apiserver requires the signer name (with '/' as ':')
// as prefix.
func ClusterTrustBundleName(signerName, caName string) string {
	return strings.ReplaceAll(signerName, "/", ":") + ":" + caName
}

func (c *Controller) ensureClusterTrustBundle(ctx context.Context, signerName string, ca *rotationv1alpha1.CertificateAuthority, owner *metav1.OwnerReference) error {
	ctbs := c.kube.CertificatesV1().ClusterTrustBundles()
	name := ClusterTrustBundleName(signerName, ca.Name)
	ctb, err := ctbs.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = ctbs.Create(ctx, &certificatesv1.ClusterTrustBundle{
			ObjectMeta: meta(name, "", ca, owner),
			Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: signerName, TrustBundle: ca.Status.TrustBundle},
		}, metav1.CreateOptions{FieldManager: fieldManager})
		return err
	}
	if err != nil {
		return err
	}
	if ctb.Labels[OwnerLabel] != ca.Name {
		return fmt.Errorf("ClusterTrustBundle %s exists and was not written by rekey for %s; not overwritten", name, ca.Name)
	}
	if ctb.Spec.TrustBundle == ca.Status.TrustBundle && !lacksOwner(ctb.OwnerReferences, owner) {
		return nil
	}
	updated := ctb.DeepCopy()
	if lacksOwner(updated.OwnerReferences, owner) {
		updated.OwnerReferences = withOwner(updated.OwnerReferences, owner)
	}
	updated.Spec.TrustBundle = ca.Status.TrustBundle
	_, err = ctbs.Update(ctx, updated, metav1.UpdateOptions{FieldManager: fieldManager})
	return err
}

// apiServices is the resource of the APIService that owns what is
// published.
var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// APIServiceOwner makes the named APIService the owner of every published
// bundle; none while it does not exist (rekey not registered in the
// cluster, or standalone).
func APIServiceOwner(client dynamic.Interface, name string) Owner {
	return func(ctx context.Context) (*metav1.OwnerReference, error) {
		svc, err := client.Resource(apiServices).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return &metav1.OwnerReference{APIVersion: "apiregistration.k8s.io/v1", Kind: "APIService", Name: svc.GetName(), UID: svc.GetUID()}, nil
	}
}
