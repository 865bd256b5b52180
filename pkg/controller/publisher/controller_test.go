package publisher

import (
	"context"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
)

func newFixture(t *testing.T, objects ...runtime.Object) (*Controller, *kubefake.Clientset) {
	t.Helper()
	nsIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	signerIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "listed"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "labelled", Labels: map[string]string{"trust": "team"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "going", Labels: map[string]string{"trust": "team"}}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}},
	} {
		if err := nsIndexer.Add(ns); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*certv1alpha1.Signer{
		{ObjectMeta: metav1.ObjectMeta{Name: "example.com:team"}, Spec: certv1alpha1.SignerSpec{SignerName: "example.com/team", CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "team-ca"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "example.com:other"}, Spec: certv1alpha1.SignerSpec{SignerName: "example.com/other", CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "other-ca"}}},
	} {
		if err := signerIndexer.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	kube := kubefake.NewSimpleClientset(objects...)
	return &Controller{kube: kube, signers: certlisters.NewSignerLister(signerIndexer), namespaces: corelisters.NewNamespaceLister(nsIndexer)}, kube
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
	c, kube := newFixture(t, earlier)
	owner := metav1.OwnerReference{APIVersion: "apiregistration.k8s.io/v1", Kind: "APIService", Name: "v1alpha1.rotation.rekey.io", UID: "u-1"}
	c.Owner = func(context.Context) (*metav1.OwnerReference, error) { return &owner, nil }
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
