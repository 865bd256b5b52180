package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/controller/publisher"
	"rekey.io/rekey/test/framework"
)

// TestRotationIsPublishedToTheCluster: the ConfigMaps and the
// ClusterTrustBundle of a CA carry old and new during a rotation and only
// the new one after it, on the real kube-apiserver.
func TestRotationIsPublishedToTheCluster(t *testing.T) {
	ctx := context.Background()
	admin := cluster.RekeyAdmin
	publishingCA(t, "pub", "pub-ca-bundle")
	ctbName := publisher.ClusterTrustBundleName("example.com/pub", "pub-ca")
	published := func(want int) {
		t.Helper()
		framework.Eventually(t, 60*time.Second, fmt.Sprintf("a bundle of %d certificate(s) published", want), func(ctx context.Context) error {
			for _, ns := range []string{"pub-listed", "pub-selected"} {
				cm, err := cluster.Admin.CoreV1().ConfigMaps(ns).Get(ctx, "pub-ca-bundle", metav1.GetOptions{})
				if err != nil {
					return err
				}
				if n := strings.Count(cm.Data[publisher.BundleKey], "BEGIN CERTIFICATE"); n != want {
					return fmt.Errorf("%s: %d certificate(s)", ns, n)
				}
			}
			ctb, err := cluster.Admin.CertificatesV1().ClusterTrustBundles().Get(ctx, ctbName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if ctb.Spec.SignerName != "example.com/pub" || strings.Count(ctb.Spec.TrustBundle, "BEGIN CERTIFICATE") != want {
				return fmt.Errorf("ClusterTrustBundle for %s with %d certificate(s)", ctb.Spec.SignerName, strings.Count(ctb.Spec.TrustBundle, "BEGIN CERTIFICATE"))
			}
			return nil
		})
	}
	published(1)
	// Prepared (and its event) follows the publication at once, without
	// trustPropagation on top.
	if err := framework.SetImmediateRotation(ctx, admin, "pub-ca"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "pub-ca", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	published(2)
	// Requesters learn early: an event on the CA says the rotation started.
	framework.Eventually(t, 30*time.Second, "a RotationPrepared event on the CA", func(ctx context.Context) error {
		events, err := cluster.Admin.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=pub-ca,reason=RotationPrepared"})
		if err != nil {
			return err
		}
		if len(events.Items) == 0 || events.Items[0].InvolvedObject.Kind != "CertificateAuthority" {
			return fmt.Errorf("events %+v", events.Items)
		}
		return nil
	})
	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "pub-ca", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete, Force: true}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	published(1)
	ca, err := admin.RotationV1alpha1().CertificateAuthorities().Get(ctx, "pub-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := cluster.Admin.CoreV1().ConfigMaps("pub-listed").Get(ctx, "pub-ca-bundle", metav1.GetOptions{})
	if err != nil || cm.Data[publisher.BundleKey] != ca.Status.TrustBundle {
		t.Fatalf("the published bundle is not the CA's: %v", err)
	}
}

// TestPublishIsNotAConfusedDeputy: rekey writes published bundles with its
// own identity, so a CA editor may only publish where they may write.
func TestPublishIsNotAConfusedDeputy(t *testing.T) {
	ctx := context.Background()
	clusterRole(t, "e2e-ca-only-editor", rbacv1.PolicyRule{
		APIGroups: []string{"rotation.rekey.io"}, Resources: []string{"certificateauthorities"}, Verbs: []string{"*"},
	})
	editor, _ := userClient(t, "ca-only-editor")
	bind(t, "ca-only-editor", "e2e-ca-only-editor")
	newCA := func(name string, ns string) *rotationv1alpha1.CertificateAuthority {
		return &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: rotationv1alpha1.CertificateAuthoritySpec{CommonName: name, KeyAlgorithm: rotationv1alpha1.ECDSAP256, Validity: metav1.Duration{Duration: 24 * time.Hour},
				KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd},
				Publish:  &rotationv1alpha1.Publish{ConfigMaps: &rotationv1alpha1.ConfigMapPublish{Namespaces: []string{ns}}}}}
	}
	// RBAC reaches the caches first: a CA without publish shows it has.
	framework.Eventually(t, settleTimeout, "ca-only-editor creating a CA without publish", func(ctx context.Context) error {
		_, err := editor.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "deputy-probe"},
			Spec: rotationv1alpha1.CertificateAuthoritySpec{CommonName: "p", KeyAlgorithm: rotationv1alpha1.ECDSAP256, Validity: metav1.Duration{Duration: 24 * time.Hour},
				KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd}}}, metav1.CreateOptions{})
		return err
	})
	_, err := editor.RotationV1alpha1().CertificateAuthorities().Create(ctx, newCA("deputy", "kube-system"), metav1.CreateOptions{})
	requireForbidden(t, err, `namespace "kube-system"`, "configmaps")
}

// publishingCA makes the namespaces <prefix>-listed and <prefix>-selected
// (labelled rekey-e2e-trust=<prefix>), lets rekey attest for example.com
// signers, and creates the CA <prefix>-ca, which publishes its bundle to
// both namespaces (as ConfigMap configMapName; "" is the default name) and
// as the ClusterTrustBundle of its Signer example.com/<prefix>.
func publishingCA(t *testing.T, prefix, configMapName string) {
	t.Helper()
	ctx := context.Background()
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-listed"}},
		{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-selected", Labels: map[string]string{"rekey-e2e-trust": prefix}}},
	} {
		if _, err := cluster.Admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// rekey may attest for example.com signers (ClusterTrustBundles).
	clusterRole(t, "e2e-rekey-attest-example.com", rbacv1.PolicyRule{
		APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"}, ResourceNames: []string{"example.com/*"}, Verbs: []string{"attest"},
	})
	bind(t, framework.RekeyServiceAccountUser, "e2e-rekey-attest-example.com")
	caName := prefix + "-ca"
	if _, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: caName},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{CommonName: prefix + " CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256, Validity: metav1.Duration{Duration: 24 * time.Hour},
			KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd},
			Publish: &rotationv1alpha1.Publish{ClusterTrustBundle: true, ConfigMaps: &rotationv1alpha1.ConfigMapPublish{Name: configMapName,
				Namespaces: []string{prefix + "-listed"}, NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rekey-e2e-trust": prefix}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.RekeyAdmin.CertificatesV1alpha1().Signers().Create(ctx, signerObject("example.com/"+prefix, caName), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
