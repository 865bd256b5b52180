package cleaner

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
)

// TestCleanOnceDeletesOnlyWhatIsDue, by UID, so that a request made again
// under the same name in the meantime survives.
func TestCleanOnceDeletesOnlyWhatIsDue(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	old := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "old", UID: "uid-old", CreationTimestamp: metav1.NewTime(now.Add(-25 * time.Hour))}}
	fresh := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "fresh", UID: "uid-fresh", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))}}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, csr := range []*certv1alpha1.CertificateSigningRequest{old, fresh} {
		if err := indexer.Add(csr); err != nil {
			t.Fatal(err)
		}
	}
	client := fake.NewSimpleClientset(old, fresh)
	c := NewController(client, certlisters.NewCertificateSigningRequestLister(indexer), clocktesting.NewFakePassiveClock(now), time.Minute)
	c.CleanOnce(context.Background())
	actions := client.Actions()
	if len(actions) != 1 || actions[0].GetVerb() != "delete" {
		t.Fatalf("actions %v, want one delete", actions)
	}
	del := actions[0].(k8stesting.DeleteAction)
	if del.GetName() != "old" || del.GetDeleteOptions().Preconditions == nil || *del.GetDeleteOptions().Preconditions.UID != "uid-old" {
		t.Fatalf("deleted %s with %+v, want old with its UID as precondition", del.GetName(), del.GetDeleteOptions())
	}
}
