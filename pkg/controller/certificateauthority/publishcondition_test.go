package certificateauthority

import (
	"context"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/signing/signingtest"
	"rekey.io/rekey/pkg/trustpublish"
)

// On a server without a host cluster, a CA's spec.publish is not carried
// out, and status says so (issue #32) instead of accepting it silently.
func TestPublishWithoutAHostClusterIsReported(t *testing.T) {
	ca := newCA("team-ca", "0123456789")
	ca.Spec.Publish = &rotationv1alpha1.Publish{ClusterTrustBundle: true}
	c, client, _ := newTestController(t, ca, signingtest.NewMemoryKeys())
	if _, err := c.Handle(context.Background(), ca); err != nil {
		t.Fatal(err)
	}
	updated := statusUpdate(t, client)
	cond := apimeta.FindStatusCondition(updated.Status.Conditions, rotationv1alpha1.CertificateAuthorityPublished)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != rotationv1alpha1.ReasonNoHostCluster ||
		!strings.Contains(cond.Message, "spec.publish is not carried out: rekey-apiserver runs without a host cluster") {
		t.Fatalf("Published = %+v, want False NoHostCluster saying spec.publish is not carried out", cond)
	}

	// Without spec.publish the condition goes.
	unpublished := updated.DeepCopy()
	unpublished.Spec.Publish = nil
	client.ClearActions()
	if _, err := c.Handle(context.Background(), unpublished); err != nil {
		t.Fatal(err)
	}
	if cond := apimeta.FindStatusCondition(statusUpdate(t, client).Status.Conditions, rotationv1alpha1.CertificateAuthorityPublished); cond != nil {
		t.Fatalf("Published = %+v after spec.publish was removed", cond)
	}

	// With a host cluster (a publisher runs) there is no such condition.
	ca = newCA("other-ca", "9876543210")
	ca.Spec.Publish = &rotationv1alpha1.Publish{ClusterTrustBundle: true}
	c, client, _ = newTestController(t, ca, signingtest.NewMemoryKeys())
	c.published = trustpublish.New()
	if _, err := c.Handle(context.Background(), ca); err != nil {
		t.Fatal(err)
	}
	if cond := apimeta.FindStatusCondition(statusUpdate(t, client).Status.Conditions, rotationv1alpha1.CertificateAuthorityPublished); cond != nil {
		t.Fatalf("Published = %+v with a host cluster", cond)
	}
}
