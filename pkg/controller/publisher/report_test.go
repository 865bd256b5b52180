package publisher

import (
	"context"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8stesting "k8s.io/client-go/testing"

	"rekey.io/rekey/pkg/trustpublish"
	"rekey.io/rekey/test/framework"
)

// reportAfterSync runs one sync of team-ca, published with bundle, and
// returns what the tracker says lags for it ("" for nothing).
func reportAfterSync(t *testing.T, bundle string, objects ...runtime.Object) string {
	t.Helper()
	return reportAfterSyncOf(t, newFixtureWith(t, nil, objects...), bundle)
}

// reportAfterSyncOf is reportAfterSync on a fixture of the caller's.
func reportAfterSyncOf(t *testing.T, f *fixture, bundle string) string {
	t.Helper()
	tracker := trustpublish.New()
	f.c.reporter = tracker.Register("rekey-publisher", Concerns)
	ca := teamCA(bundle)
	if _, err := f.rekey.RotationV1alpha1().CertificateAuthorities().Create(f.ctx, ca, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 10*time.Second, "the CA in the publisher's cache", func(context.Context) error {
		_, err := f.c.cas.Get("team-ca")
		return err
	})
	_, _ = f.c.sync(f.ctx, "team-ca")
	return strings.Join(tracker.Lagging(ca), "; ")
}

// TestANamespacesOwnConfigMapDoesNotHoldTheRotation: a ConfigMap of the
// published name that rekey did not write, in a namespace whose editors
// made it, is reported but does not keep the CA's bundle from counting as
// published (a namespace editor could otherwise hold every rotation); a
// ClusterTrustBundle rekey cannot write does, as does any other failure.
func TestANamespacesOwnConfigMapDoesNotHoldTheRotation(t *testing.T) {
	squatted := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", Namespace: "listed"}, Data: map[string]string{BundleKey: "theirs"}}
	if lag := reportAfterSync(t, "OLD+NEW", squatted); lag != "" {
		t.Fatalf("a namespace's own ConfigMap held the publication: %s", lag)
	}
	foreignCTB := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "example.com:team:team-ca"}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: "theirs"}}
	if lag := reportAfterSync(t, "OLD+NEW", foreignCTB); !strings.Contains(lag, "not overwritten") {
		t.Fatalf("a ClusterTrustBundle rekey could not write did not hold the publication: %q", lag)
	}
	if lag := reportAfterSync(t, "OLD+NEW"); lag != "" {
		t.Fatalf("everything written, yet lagging: %s", lag)
	}
	// rekey's own ConfigMap made immutable there: local too.
	immutable := true
	frozen := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "team-ca", Namespace: "listed", Labels: map[string]string{OwnerLabel: "team-ca"}},
		Data: map[string]string{BundleKey: "OLD"}, Immutable: &immutable}
	if lag := reportAfterSync(t, "OLD+NEW", frozen); lag != "" {
		t.Fatalf("rekey's ConfigMap made immutable in a namespace held the publication: %s", lag)
	}
}

// TestARefusedConfigMapWriteHoldsTheRotation: a write refused for any
// other reason (a webhook's or validation's 422, say) is rekey's failure,
// not the namespace's doing: the bundle does not count as published.
func TestARefusedConfigMapWriteHoldsTheRotation(t *testing.T) {
	f := newFixtureWith(t, nil)
	f.kube.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "team-ca", field.ErrorList{field.Invalid(field.NewPath("metadata", "labels"), "x", "refused by a webhook")})
	})
	if lag := reportAfterSyncOf(t, f, "OLD+NEW"); !strings.Contains(lag, "refused by a webhook") {
		t.Fatalf("a refused write did not hold the publication: %q", lag)
	}
}
