package cleaner

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
)

// TestCleanOnceDeletesOnlyWhatIsDue, by UID, so that a request made again
// under the same name in the meantime survives.
func TestCleanOnceDeletesOnlyWhatIsDue(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	old := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "old", UID: "uid-old", CreationTimestamp: metav1.NewTime(now.Add(-25 * time.Hour))}}
	fresh := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "fresh", UID: "uid-fresh", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))}}
	client := fake.NewSimpleClientset(old, fresh)
	c := NewController(client, clocktesting.NewFakePassiveClock(now), time.Minute)
	c.CleanOnce(context.Background())
	actions := client.Actions()
	if len(actions) != 2 || actions[0].GetVerb() != "list" || actions[1].GetVerb() != "delete" {
		t.Fatalf("actions %v, want a list and one delete", actions)
	}
	if restrictions := actions[0].(k8stesting.ListActionImpl).GetListRestrictions(); !restrictions.Labels.Empty() || !restrictions.Fields.Empty() {
		t.Errorf("listed %+v, want every request", restrictions)
	}
	del := actions[1].(k8stesting.DeleteAction)
	if del.GetName() != "old" || del.GetDeleteOptions().Preconditions == nil || *del.GetDeleteOptions().Preconditions.UID != "uid-old" {
		t.Fatalf("deleted %s with %+v, want old with its UID as precondition", del.GetName(), del.GetDeleteOptions())
	}
}
