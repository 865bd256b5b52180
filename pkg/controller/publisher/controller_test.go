package publisher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	rekeyfake "rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
)

// fixture is a publisher on fake clients, its informers started: the host
// cluster's (namespaces, what it published) and rekey's (CAs, Signers).
type fixture struct {
	deps  Deps
	c     *Controller
	kube  *kubefake.Clientset
	rekey *rekeyfake.Clientset
	ctx   context.Context
}

func newFixture(t *testing.T, objects ...runtime.Object) (*Controller, *kubefake.Clientset) {
	f := newFixtureWith(t, nil, objects...)
	return f.c, f.kube
}

// newFixtureWith builds the fixture; apiServices (nil for none) holds the
// owner APIService.
func newFixtureWith(t *testing.T, apiServices *dynamicfake.FakeDynamicClient, objects ...runtime.Object) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kubeObjects := append([]runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "listed"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "labelled", Labels: map[string]string{"trust": "team"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "going", Labels: map[string]string{"trust": "team"}}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}},
	}, objects...)
	rekey := rekeyfake.NewSimpleClientset(
		&certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: "example.com:team"}, Spec: certv1alpha1.SignerSpec{SignerName: "example.com/team", CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "team-ca"}}},
		&certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: "example.com:other"}, Spec: certv1alpha1.SignerSpec{SignerName: "example.com/other", CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "other-ca"}}},
	)
	kube := kubefake.NewClientset(kubeObjects...)
	kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{GroupVersion: "certificates.k8s.io/v1",
		APIResources: []metav1.APIResource{{Name: "certificatesigningrequests"}, {Name: "clustertrustbundles"}}}}
	kubeFactory := kubeinformers.NewSharedInformerFactory(kube, 0)
	rekeyFactory := informers.NewSharedInformerFactory(rekey, 0)
	deps := Deps{Kube: kube, CAs: rekeyFactory.Rotation().V1alpha1().CertificateAuthorities(), Signers: rekeyFactory.Certificates().V1alpha1().Signers(),
		Namespaces: kubeFactory.Core().V1().Namespaces()}
	if apiServices != nil {
		deps.APIServices, deps.OwnerAPIService = apiServices, "v1alpha1.rotation.rekey.io"
	}
	c := New(deps)
	kubeFactory.Start(ctx.Done())
	rekeyFactory.Start(ctx.Done())
	c.published.Start(ctx.Done())
	go c.ctbs.RunWithContext(ctx)
	synced := []cache.InformerSynced{deps.CAs.Informer().HasSynced, deps.Signers.Informer().HasSynced, deps.Namespaces.Informer().HasSynced, c.configMaps.HasSynced, c.ctbs.HasSynced}
	if c.ownerInformer != nil {
		go c.ownerInformer.RunWithContext(ctx)
		synced = append(synced, c.ownerInformer.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		t.Fatal("informers not synced")
	}
	return &fixture{deps: deps, c: c, kube: kube, rekey: rekey, ctx: ctx}
}

// settle waits until the publisher's caches show what the fake cluster
// holds of its labelled objects (its own writes come back through them).
func settle(t *testing.T, c *Controller, kube *kubefake.Clientset) {
	t.Helper()
	versions := func(objs []any) map[string]string {
		out := map[string]string{}
		for _, o := range objs {
			m, _ := meta.Accessor(o)
			out[m.GetNamespace()+"/"+m.GetName()] = m.GetResourceVersion()
		}
		return out
	}
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		cms, err := kube.Tracker().List(corev1.SchemeGroupVersion.WithResource("configmaps"), corev1.SchemeGroupVersion.WithKind("ConfigMap"), "")
		if err != nil {
			return false, err
		}
		ctbs, err := kube.Tracker().List(certificatesv1.SchemeGroupVersion.WithResource("clustertrustbundles"), certificatesv1.SchemeGroupVersion.WithKind("ClusterTrustBundle"), "")
		if err != nil {
			return false, err
		}
		var want []any
		for i := range cms.(*corev1.ConfigMapList).Items {
			if cm := &cms.(*corev1.ConfigMapList).Items[i]; cm.Labels[OwnerLabel] != "" {
				want = append(want, cm)
			}
		}
		for i := range ctbs.(*certificatesv1.ClusterTrustBundleList).Items {
			if ctb := &ctbs.(*certificatesv1.ClusterTrustBundleList).Items[i]; ctb.Labels[OwnerLabel] != "" {
				want = append(want, ctb)
			}
		}
		return cmp.Equal(versions(want), versions(append(c.configMaps.GetStore().List(), c.ctbs.GetStore().List()...))), nil
	})
	if err != nil {
		t.Fatal("the publisher's caches never caught up with its writes")
	}
}

// writes are the requests a fake client received, but the informers'
// lists and watches.
func writes(kube *kubefake.Clientset) []string {
	var out []string
	for _, a := range kube.Actions() {
		if a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		name := ""
		if n, ok := a.(interface{ GetName() string }); ok {
			name = n.GetName()
		}
		if c, ok := a.(k8stesting.CreateAction); ok {
			if m, err := meta.Accessor(c.GetObject()); err == nil {
				name = m.GetName()
			}
		}
		out = append(out, fmt.Sprintf("%s %s %s/%s", a.GetVerb(), a.GetResource().Resource, a.GetNamespace(), name))
	}
	return out
}

func teamCA(bundle string) *rotationv1alpha1.CertificateAuthority {
	return &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: "team-ca"},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{Publish: &rotationv1alpha1.Publish{
			ConfigMaps: &rotationv1alpha1.ConfigMapPublish{Namespaces: []string{"listed", "missing"},
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"trust": "team"}}},
			ClusterTrustBundle: true,
		}},
		Status: rotationv1alpha1.CertificateAuthorityStatus{TrustBundle: bundle},
	}
}

// TestHandlePublishesEverywhereAsked: listed and selected namespaces that
// exist (not terminating), and one ClusterTrustBundle per Signer of the
// CA; a changed bundle updates them; nothing else is touched.
func TestHandlePublishesEverywhereAsked(t *testing.T) {
	c, kube := newFixture(t)
	ctx := context.Background()
	if err := c.Handle(ctx, teamCA("OLD+NEW")); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"listed", "labelled"} {
		cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "team-ca", metav1.GetOptions{})
		if err != nil || cm.Data[BundleKey] != "OLD+NEW" || cm.Labels[OwnerLabel] != "team-ca" {
			t.Fatalf("ConfigMap in %s: %+v %v", ns, cm, err)
		}
	}
	for _, ns := range []string{"other", "going", "missing"} {
		if _, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "team-ca", metav1.GetOptions{}); err == nil {
			t.Errorf("a ConfigMap was written in %s", ns)
		}
	}
	ctbs, err := kube.CertificatesV1().ClusterTrustBundles().List(ctx, metav1.ListOptions{})
	if err != nil || len(ctbs.Items) != 1 || ctbs.Items[0].Name != "example.com:team:team-ca" || ctbs.Items[0].Spec.SignerName != "example.com/team" || ctbs.Items[0].Spec.TrustBundle != "OLD+NEW" {
		t.Fatalf("ClusterTrustBundles %+v %v", ctbs, err)
	}

	// After the rotation completes: only the new CA.
	settle(t, c, kube)
	if err := c.Handle(ctx, teamCA("NEW")); err != nil {
		t.Fatal(err)
	}
	cm, err := kube.CoreV1().ConfigMaps("listed").Get(ctx, "team-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctb, err := kube.CertificatesV1().ClusterTrustBundles().Get(ctx, "example.com:team:team-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[BundleKey] != "NEW" || ctb.Spec.TrustBundle != "NEW" {
		t.Fatalf("not updated: %q %q", cm.Data[BundleKey], ctb.Spec.TrustBundle)
	}
}

func TestHandleDoesNotOverwriteForeignObjects(t *testing.T) {
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", Namespace: "listed"}, Data: map[string]string{BundleKey: "theirs"}}
	foreignCTB := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "example.com:team:team-ca"}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: "theirs"}}
	c, kube := newFixture(t, foreign, foreignCTB)
	err := c.Handle(context.Background(), teamCA("OURS"))
	if err == nil || !strings.Contains(err.Error(), "not overwritten") {
		t.Fatalf("error %v", err)
	}
	cm, err := kube.CoreV1().ConfigMaps("listed").Get(context.Background(), "team-ca", metav1.GetOptions{})
	if err != nil || cm.Data[BundleKey] != "theirs" {
		t.Fatal("a ConfigMap rekey did not write was overwritten")
	}
	// The other namespace still got it.
	if cm, err := kube.CoreV1().ConfigMaps("labelled").Get(context.Background(), "team-ca", metav1.GetOptions{}); err != nil || cm.Data[BundleKey] != "OURS" {
		t.Fatalf("labelled: %v", err)
	}
}

func TestNothingBeforeABundleOrWithoutPublish(t *testing.T) {
	c, kube := newFixture(t)
	kube.ClearActions() // the informers' lists and watches
	if err := c.Handle(context.Background(), teamCA("")); err != nil {
		t.Fatal(err)
	}
	unpublished := teamCA("B")
	unpublished.Spec.Publish = nil
	if err := c.Handle(context.Background(), unpublished); err != nil {
		t.Fatal(err)
	}
	if len(kube.Actions()) != 0 {
		t.Fatalf("actions %v", kube.Actions())
	}
}

// TestHandleSetsOwner: with an owner (rekey's APIService), every published
// object carries it, and objects published before get it on the next sync,
// replacing a reinstalled rekey's stale reference, so that uninstalling
// rekey lets the garbage collector remove them.
func TestHandleSetsOwner(t *testing.T) {
	stale := metav1.OwnerReference{APIVersion: "apiregistration.k8s.io/v1", Kind: "APIService", Name: "v1alpha1.rotation.rekey.io", UID: "old"}
	earlier := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", Namespace: "labelled", Labels: map[string]string{OwnerLabel: "team-ca"},
		OwnerReferences: []metav1.OwnerReference{stale}}, Data: map[string]string{BundleKey: "B1"}}
	owner := metav1.OwnerReference{APIVersion: "apiregistration.k8s.io/v1", Kind: "APIService", Name: "v1alpha1.rotation.rekey.io", UID: "u-1"}
	f := newFixtureWith(t, ownerAPIService("u-1"), earlier)
	c, kube := f.c, f.kube
	if err := c.Handle(context.Background(), teamCA("B1")); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"listed", "labelled"} {
		cm, err := kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "team-ca", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0] != owner {
			t.Fatalf("ConfigMap %s/team-ca owners %+v, want only %+v", ns, cm.OwnerReferences, owner)
		}
	}
	ctb, err := kube.CertificatesV1().ClusterTrustBundles().Get(context.Background(), ClusterTrustBundleName("example.com/team", "team-ca"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ctb.OwnerReferences) != 1 || ctb.OwnerReferences[0] != owner {
		t.Fatalf("ClusterTrustBundle owners %+v", ctb.OwnerReferences)
	}
	// Nothing more to write on the next sync.
	settle(t, c, kube)
	kube.ClearActions()
	if err := c.Handle(context.Background(), teamCA("B1")); err != nil {
		t.Fatal(err)
	}
	for _, a := range kube.Actions() {
		if a.GetVerb() != "get" {
			t.Fatalf("second sync wrote: %v", a)
		}
	}
}

// TestSteadyStateMakesNoRequests: once what a CA asks for is published,
// syncing it again reads only the caches, the owner included.
func TestSteadyStateMakesNoRequests(t *testing.T) {
	apiServices := ownerAPIService("u-1")
	f := newFixtureWith(t, apiServices)
	if err := f.c.caInformer.Informer().GetIndexer().Add(teamCA("B1")); err != nil {
		t.Fatal(err)
	}
	f.kube.ClearActions()
	if err := f.c.Handle(f.ctx, teamCA("B1")); err != nil {
		t.Fatal(err)
	}
	want := []string{"create configmaps labelled/team-ca", "create configmaps listed/team-ca", "create clustertrustbundles /example.com:team:team-ca"}
	if diff := cmp.Diff(want, writes(f.kube)); diff != "" {
		t.Fatalf("first sync (-want +got):\n%s", diff)
	}
	cm, err := f.kube.CoreV1().ConfigMaps("listed").Get(f.ctx, "team-ca", metav1.GetOptions{})
	if err != nil || len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != "u-1" {
		t.Fatalf("the owner from the informer is not on the ConfigMap: %+v %v", cm, err)
	}
	settle(t, f.c, f.kube)
	f.kube.ClearActions()
	apiServices.ClearActions()
	for range 3 {
		if _, err := f.c.sync(f.ctx, "team-ca"); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.c.Handle(f.ctx, teamCA("B1")); err != nil {
		t.Fatal(err)
	}
	if a := append(writes(f.kube), apiServiceRequests(apiServices)...); len(a) != 0 {
		t.Fatalf("a steady-state sync made requests: %v", a)
	}
	// A changed bundle is one apply per object.
	if err := f.c.Handle(f.ctx, teamCA("B2")); err != nil {
		t.Fatal(err)
	}
	want = []string{"patch configmaps labelled/team-ca", "patch configmaps listed/team-ca", "patch clustertrustbundles /example.com:team:team-ca"}
	if diff := cmp.Diff(want, writes(f.kube)); diff != "" {
		t.Fatalf("bundle change (-want +got):\n%s", diff)
	}
	for _, a := range f.kube.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && p.GetPatchType() != types.ApplyPatchType {
			t.Errorf("%s %s written with a %s patch, want server-side apply", a.GetVerb(), a.GetResource().Resource, p.GetPatchType())
		}
	}
}

var apiServicesGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// ownerAPIService is a host cluster with rekey's APIService
// v1alpha1.rotation.rekey.io of the given UID.
func ownerAPIService(uid string) *dynamicfake.FakeDynamicClient {
	owner := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1alpha1.rotation.rekey.io", "uid": uid}}}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{apiServicesGVR: "APIServiceList"}, owner)
}

func apiServiceRequests(c *dynamicfake.FakeDynamicClient) []string {
	var out []string
	for _, a := range c.Actions() {
		if a.GetVerb() != "list" && a.GetVerb() != "watch" {
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
		}
	}
	return out
}

// TestStaleBundlesAreRemoved: what rekey published for a CA and the CA no
// longer asks for goes: a namespace no longer selected, ClusterTrustBundles
// turned off, the CA deleted. Someone else's objects and another CA's stay.
func TestStaleBundlesAreRemoved(t *testing.T) {
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", Namespace: "other"}, Data: map[string]string{BundleKey: "theirs"}}
	otherCA := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other-ca", Namespace: "listed", Labels: map[string]string{OwnerLabel: "other-ca"}}, Data: map[string]string{BundleKey: "O"}}
	c, kube := newFixture(t, foreign, otherCA)
	ctx := context.Background()
	if err := c.Handle(ctx, teamCA("B1")); err != nil {
		t.Fatal(err)
	}
	settle(t, c, kube)

	narrowed := teamCA("B1")
	narrowed.Spec.Publish.ConfigMaps.NamespaceSelector = nil
	narrowed.Spec.Publish.ClusterTrustBundle = false
	kube.ClearActions()
	if err := c.Handle(ctx, narrowed); err != nil {
		t.Fatal(err)
	}
	want := []string{"delete configmaps labelled/team-ca", "delete clustertrustbundles /example.com:team:team-ca"}
	if diff := cmp.Diff(want, writes(kube)); diff != "" {
		t.Fatalf("narrowed publish (-want +got):\n%s", diff)
	}
	settle(t, c, kube)

	// The CA is gone (not in the lister): everything of it goes.
	kube.ClearActions()
	if _, err := c.sync(ctx, "team-ca"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"delete configmaps listed/team-ca"}, writes(kube)); diff != "" {
		t.Fatalf("deleted CA (-want +got):\n%s", diff)
	}
	for _, ns := range []string{"listed", "labelled"} {
		if _, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "team-ca", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ConfigMap %s/team-ca: %v, want it removed", ns, err)
		}
	}
	if cm, err := kube.CoreV1().ConfigMaps("other").Get(ctx, "team-ca", metav1.GetOptions{}); err != nil || cm.Data[BundleKey] != "theirs" {
		t.Errorf("someone else's ConfigMap: %v", err)
	}
	if _, err := kube.CoreV1().ConfigMaps("listed").Get(ctx, "other-ca", metav1.GetOptions{}); err != nil {
		t.Errorf("another CA's ConfigMap: %v", err)
	}
}

// TestNamespaceUpdateWithoutLabelChangeEnqueuesNothing: only a label
// change can move a bundle, and only the CAs it concerns are queued.
func TestNamespaceUpdateWithoutLabelChangeEnqueuesNothing(t *testing.T) {
	f := newFixtureWith(t, nil)
	rekeyCAs := f.c.caInformer.Informer().GetIndexer()
	if err := rekeyCAs.Add(teamCA("B")); err != nil {
		t.Fatal(err)
	}
	if err := rekeyCAs.Add(&rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "unpublished"}}); err != nil {
		t.Fatal(err)
	}
	old := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other", ResourceVersion: "1"}}
	annotated := old.DeepCopy()
	annotated.ResourceVersion, annotated.Annotations = "2", map[string]string{"note": "x"}
	f.c.namespaceUpdated(old, annotated)
	f.c.namespaceUpdated(annotated, annotated) // a resync
	if n := f.c.queue.Len(); n != 0 {
		t.Fatalf("%d keys queued by namespace updates without a label change", n)
	}
	labelled := annotated.DeepCopy()
	labelled.Labels = map[string]string{"trust": "team"}
	f.c.namespaceUpdated(annotated, labelled)
	if n := f.c.queue.Len(); n != 1 {
		t.Fatalf("%d keys queued by a label change, want 1 (team-ca)", n)
	}
	if key, _ := f.c.queue.Get(); key != "team-ca" {
		t.Fatalf("queued %q", key)
	}
}

// TestRunWritesBackADeletedBundle: Run publishes a CA's bundle, writes a
// deleted ConfigMap back (its informer's delete event), removes what a
// deleted CA published, and returns when its context ends.
func TestRunWritesBackADeletedBundle(t *testing.T) {
	f := newFixtureWith(t, nil)
	if _, err := f.rekey.RotationV1alpha1().CertificateAuthorities().Create(f.ctx, teamCA("B1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A controller of its own: the fixture's started its informers.
	c := New(f.deps)
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, 1) }()
	published := func(ns string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			cm, err := f.kube.CoreV1().ConfigMaps(ns).Get(ctx, "team-ca", metav1.GetOptions{})
			return err == nil && cm.Data[BundleKey] == "B1", nil
		}
	}
	if err := wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, 10*time.Second, true, published("listed")); err != nil {
		t.Fatal("not published")
	}
	if err := f.kube.CoreV1().ConfigMaps("listed").Delete(f.ctx, "team-ca", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, 10*time.Second, true, published("listed")); err != nil {
		t.Fatal("the deleted ConfigMap was not written back")
	}
	if err := f.rekey.RotationV1alpha1().CertificateAuthorities().Delete(f.ctx, "team-ca", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		cms, err := f.kube.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{LabelSelector: OwnerLabel})
		return err == nil && len(cms.Items) == 0, nil
	}); err != nil {
		t.Fatal("the deleted CA's ConfigMaps were not removed")
	}
	cancel()
	<-done
}

// TestCacheHoldsDigestsNotBundles: the publisher's caches keep of what it
// published a fixed-size digest of the bundle and no other data or
// annotations (labelled 1 MiB ConfigMaps must not fill rekey's memory),
// and compare the CA's bundle by that digest.
func TestCacheHoldsDigestsNotBundles(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	published := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", Namespace: "labelled", Labels: map[string]string{OwnerLabel: "team-ca"},
		Annotations: map[string]string{"big": big}}, Data: map[string]string{BundleKey: "B1", "big": big}, BinaryData: map[string][]byte{"big": []byte(big)}}
	ctb := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "example.com:team:team-ca", Labels: map[string]string{OwnerLabel: "team-ca"}},
		Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: "example.com/team", TrustBundle: "B1"}}
	c, kube := newFixture(t, published, ctb)
	obj, ok, err := c.configMaps.GetStore().GetByKey("labelled/team-ca")
	if err != nil || !ok {
		t.Fatalf("not cached: %v", err)
	}
	cm := obj.(*corev1.ConfigMap)
	if diff := cmp.Diff(map[string]string{DigestAnnotation: digest("B1")}, cm.Annotations); diff != "" || cm.Data != nil || cm.BinaryData != nil {
		t.Fatalf("cached ConfigMap annotations (-want +got):\n%s\ndata %d keys, binaryData %d keys", diff, len(cm.Data), len(cm.BinaryData))
	}
	if cm.Labels[OwnerLabel] != "team-ca" {
		t.Fatalf("cached ConfigMap lost its label: %v", cm.Labels)
	}
	obj, ok, err = c.ctbs.GetStore().GetByKey(ctb.Name)
	if err != nil || !ok {
		t.Fatalf("not cached: %v", err)
	}
	if got := obj.(*certificatesv1.ClusterTrustBundle); got.Spec.TrustBundle != "" || cachedDigest(got) != digest("B1") || len(cachedDigest(got)) > 100 {
		t.Fatalf("cached trust bundle %.80q, digest %.80q", got.Spec.TrustBundle, cachedDigest(got))
	}
	kube.ClearActions()
	if err := c.Handle(context.Background(), teamCA("B1")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"create configmaps listed/team-ca"}, writes(kube)); diff != "" {
		t.Fatalf("what matches by digest was written again (-want +got):\n%s", diff)
	}
}

// TestObjectsBeingDeletedAreNotDeletedAgain: a stale object held by a
// finalizer is not deleted on every sync its update events cause.
func TestObjectsBeingDeletedAreNotDeletedAgain(t *testing.T) {
	now := metav1.Now()
	going := metav1.ObjectMeta{Labels: map[string]string{OwnerLabel: "team-ca"}, DeletionTimestamp: &now, Finalizers: []string{"example.com/hold"}}
	cm := &corev1.ConfigMap{ObjectMeta: *going.DeepCopy(), Data: map[string]string{BundleKey: "B1"}}
	cm.Name, cm.Namespace = "team-ca", "other"
	ctb := &certificatesv1.ClusterTrustBundle{ObjectMeta: *going.DeepCopy(), Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: "example.com/gone", TrustBundle: "B1"}}
	ctb.Name = "example.com:gone:team-ca"
	c, kube := newFixture(t, cm, ctb)
	kube.ClearActions()
	for range 2 {
		if _, err := c.sync(context.Background(), "team-ca"); err != nil {
			t.Fatal(err)
		}
	}
	if w := writes(kube); len(w) != 0 {
		t.Fatalf("objects being deleted were deleted again: %v", w)
	}
}

// TestWritesAreOnTheCachedVersion: deletes carry the cached UID and
// resourceVersion as preconditions and applies the cached resourceVersion,
// so that an object changed since (its owner took rekey's label off to
// keep it) is not lost to a stale cache.
func TestWritesAreOnTheCachedVersion(t *testing.T) {
	// The fake assigns no resourceVersions: these come with one.
	mine := map[string]string{OwnerLabel: "team-ca"}
	c, kube := newFixture(t,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", Namespace: "listed", Labels: mine, ResourceVersion: "5"}, Data: map[string]string{BundleKey: "B1"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", Namespace: "labelled", Labels: mine, ResourceVersion: "6"}, Data: map[string]string{BundleKey: "B1"}},
		&certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "example.com:team:team-ca", Labels: mine, ResourceVersion: "7"},
			Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: "example.com/team", TrustBundle: "B1"}})
	ctx := context.Background()
	cached := map[string]metav1.Object{}
	kube.ClearActions()
	if err := c.Handle(ctx, teamCA("B2")); err != nil {
		t.Fatal(err)
	}
	narrowed := teamCA("B2")
	narrowed.Spec.Publish.ConfigMaps.NamespaceSelector = nil
	narrowed.Spec.Publish.ClusterTrustBundle = false
	settle(t, c, kube)
	for _, o := range append(c.configMaps.GetStore().List(), c.ctbs.GetStore().List()...) {
		m, _ := meta.Accessor(o)
		cached[m.GetNamespace()+"/"+m.GetName()] = m
	}
	if err := c.Handle(ctx, narrowed); err != nil {
		t.Fatal(err)
	}
	var applies, deletes int
	for _, a := range kube.Actions() {
		switch a := a.(type) {
		case k8stesting.PatchAction:
			applies++
			var body struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(a.GetPatch(), &body); err != nil {
				t.Fatal(err)
			}
			if want := map[string]string{"listed": "5", "labelled": "6", "": "7"}[a.GetNamespace()]; body.Metadata.ResourceVersion != want {
				t.Errorf("apply of %s/%s without the cached resourceVersion: %s", a.GetNamespace(), a.GetName(), a.GetPatch())
			}
		case k8stesting.DeleteAction:
			deletes++
			m := cached[a.GetNamespace()+"/"+a.GetName()]
			p := a.GetDeleteOptions().Preconditions
			if m == nil || m.GetResourceVersion() == "" || p == nil || p.UID == nil || *p.UID != m.GetUID() || p.ResourceVersion == nil || *p.ResourceVersion != m.GetResourceVersion() {
				t.Errorf("delete of %s/%s with preconditions %+v, want the cached UID and resourceVersion", a.GetNamespace(), a.GetName(), p)
			}
		}
	}
	if applies != 3 || deletes != 2 {
		t.Fatalf("%d applies and %d deletes, want 3 and 2: %v", applies, deletes, writes(kube))
	}
}

// TestRunWithoutClusterTrustBundles: a host cluster that does not serve
// ClusterTrustBundles still gets the ConfigMaps; a CA that asks for a
// ClusterTrustBundle is told why it gets none.
func TestRunWithoutClusterTrustBundles(t *testing.T) {
	f := newFixtureWith(t, nil)
	f.kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = nil
	notServed := func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "certificates.k8s.io", Resource: "clustertrustbundles"}, "")
	}
	f.kube.PrependReactor("list", "clustertrustbundles", notServed)
	f.kube.PrependWatchReactor("clustertrustbundles", func(a k8stesting.Action) (bool, watch.Interface, error) {
		_, _, err := notServed(a)
		return true, nil, err
	})
	if _, err := f.rekey.RotationV1alpha1().CertificateAuthorities().Create(f.ctx, teamCA("B1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := New(f.deps)
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, 1) }()
	defer func() { cancel(); <-done }()
	if err := wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		cm, err := f.kube.CoreV1().ConfigMaps("listed").Get(ctx, "team-ca", metav1.GetOptions{})
		return err == nil && cm.Data[BundleKey] == "B1", nil
	}); err != nil {
		t.Fatal("no ConfigMap published while ClusterTrustBundles are not served")
	}
	err := c.Handle(f.ctx, teamCA("B1"))
	if err == nil || !strings.Contains(err.Error(), "does not serve ClusterTrustBundles") {
		t.Fatalf("error %v, want one saying ClusterTrustBundles are not served", err)
	}
}

// TestCacheKeepsOnlyWhatThePublisherReads: of labels, finalizers, owner
// references and annotations, which have no size limit of their own, the
// caches keep rekey's label, the owner APIService's references (two at
// most) and the bundle's digest; a second pass of the transform (a
// resync) changes nothing.
func TestCacheKeepsOnlyWhatThePublisherReads(t *testing.T) {
	big := strings.Repeat("x", 63)
	labels := map[string]string{OwnerLabel: "team-ca"}
	for i := range 1000 {
		labels[fmt.Sprintf("l%d", i)] = big
	}
	var refs []metav1.OwnerReference
	for i := range 100 {
		refs = append(refs, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: fmt.Sprintf("d%d", i), UID: types.UID(fmt.Sprintf("d-%d", i))},
			metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "APIService", Name: "v1alpha1.rotation.rekey.io", UID: types.UID(fmt.Sprintf("e-%d", i))},
			metav1.OwnerReference{APIVersion: "apiregistration.k8s.io/v1", Kind: "APIService", Name: fmt.Sprintf("other-%d", i), UID: types.UID(fmt.Sprintf("o-%d", i))})
	}
	for i := range 3 {
		refs = append(refs, metav1.OwnerReference{APIVersion: "apiregistration.k8s.io/v1", Kind: "APIService", Name: "v1alpha1.rotation.rekey.io", UID: types.UID(fmt.Sprintf("u-%d", i))})
	}
	var finalizers []string
	for i := range 1000 {
		finalizers = append(finalizers, fmt.Sprintf("example.com/hold-%d", i))
	}
	now := metav1.Now()
	held := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", Namespace: "labelled", Labels: labels, Finalizers: finalizers,
		OwnerReferences: refs, DeletionTimestamp: &now, Annotations: map[string]string{"big": big}}, Data: map[string]string{BundleKey: "B1"}}
	f := newFixtureWith(t, ownerAPIService("u-1"), held)
	obj, ok, err := f.c.configMaps.GetStore().GetByKey("labelled/team-ca")
	if err != nil || !ok {
		t.Fatalf("not cached: %v", err)
	}
	cm := obj.(*corev1.ConfigMap)
	want := metav1.ObjectMeta{Name: "team-ca", Namespace: "labelled", Labels: map[string]string{OwnerLabel: "team-ca"}, DeletionTimestamp: cm.DeletionTimestamp,
		ResourceVersion: cm.ResourceVersion, UID: cm.UID, CreationTimestamp: cm.CreationTimestamp,
		OwnerReferences: refs[300:302], Annotations: map[string]string{DigestAnnotation: digest("B1")}}
	if diff := cmp.Diff(want, cm.ObjectMeta); diff != "" || cm.DeletionTimestamp == nil {
		t.Fatalf("cached metadata (-want +got):\n%s", diff)
	}
	again, err := trimPublished("v1alpha1.rotation.rekey.io")(cm.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cm, again); diff != "" {
		t.Fatalf("a second pass of the transform changed the object (-first +second):\n%s", diff)
	}
	// Without an owner APIService, no owner reference is kept.
	bare, err := trimPublished("")(held.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	if refs := bare.(*corev1.ConfigMap).OwnerReferences; len(refs) != 0 {
		t.Fatalf("owner references kept without an owner: %v", refs)
	}
}

// TestDigestFromTheHostClusterIsNotTrusted: a namespace editor who writes
// the digest of the real bundle into a published ConfigMap, as its
// ca.crt or as the annotation the caches hold digests in, does not keep
// rekey from writing the bundle back.
func TestDigestFromTheHostClusterIsNotTrusted(t *testing.T) {
	sum := sha256.Sum256([]byte("B1"))
	plain := "sha256:" + hex.EncodeToString(sum[:])
	mine := map[string]string{OwnerLabel: "team-ca"}
	c, kube := newFixture(t,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", Namespace: "listed", Labels: mine}, Data: map[string]string{BundleKey: plain}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", Namespace: "labelled", Labels: mine, Annotations: map[string]string{DigestAnnotation: plain}}})
	ca := teamCA("B1")
	ca.Spec.Publish.ClusterTrustBundle = false
	if err := c.Handle(context.Background(), ca); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"listed", "labelled"} {
		cm, err := kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "team-ca", metav1.GetOptions{})
		if err != nil || cm.Data[BundleKey] != "B1" {
			t.Errorf("ConfigMap %s/team-ca holds %q (%v), want the bundle written back", ns, cm.Data[BundleKey], err)
		}
	}
}

// TestReplacingAStaleOwnerKeepsOtherOwners: the cache keeps only the
// owner APIService's references, so the patch that swaps a reinstalled
// rekey's stale one for the current one takes the others from the host
// cluster, and they stay. The patch is on the cached resourceVersion.
func TestReplacingAStaleOwnerKeepsOtherOwners(t *testing.T) {
	stale := metav1.OwnerReference{APIVersion: "apiregistration.k8s.io/v1", Kind: "APIService", Name: "v1alpha1.rotation.rekey.io", UID: "old"}
	theirs := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "keeper", UID: "d-1"}
	mine := map[string]string{OwnerLabel: "team-ca"}
	f := newFixtureWith(t, ownerAPIService("u-1"),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", Namespace: "listed", Labels: mine, OwnerReferences: []metav1.OwnerReference{theirs, stale}, ResourceVersion: "5"},
			Data: map[string]string{BundleKey: "B1"}},
		&certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "example.com:team:team-ca", Labels: mine, OwnerReferences: []metav1.OwnerReference{stale, theirs}, ResourceVersion: "7"},
			Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: "example.com/team", TrustBundle: "B1"}})
	f.kube.ClearActions()
	if err := f.c.Handle(f.ctx, teamCA("B1")); err != nil {
		t.Fatal(err)
	}
	for _, a := range f.kube.Actions() {
		p, ok := a.(k8stesting.PatchAction)
		if !ok || a.GetNamespace() == "labelled" {
			continue
		}
		var body struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			t.Fatal(err)
		}
		if want := map[string]string{"listed": "5", "": "7"}[a.GetNamespace()]; body.Metadata.ResourceVersion != want {
			t.Errorf("patch of %s/%s without the cached resourceVersion %s: %s", a.GetNamespace(), p.GetName(), want, p.GetPatch())
		}
	}
	owner := metav1.OwnerReference{APIVersion: "apiregistration.k8s.io/v1", Kind: "APIService", Name: "v1alpha1.rotation.rekey.io", UID: "u-1"}
	cm, err := f.kube.CoreV1().ConfigMaps("listed").Get(f.ctx, "team-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]metav1.OwnerReference{owner, theirs}, cm.OwnerReferences); diff != "" {
		t.Errorf("ConfigMap owners (-want +got):\n%s", diff)
	}
	ctb, err := f.kube.CertificatesV1().ClusterTrustBundles().Get(f.ctx, "example.com:team:team-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]metav1.OwnerReference{owner, theirs}, ctb.OwnerReferences); diff != "" {
		t.Errorf("ClusterTrustBundle owners (-want +got):\n%s", diff)
	}
}
