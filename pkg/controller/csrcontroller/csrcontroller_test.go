package csrcontroller

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
)

// TestHandlerSeesWhatPassesTheFilter: the loop calls the handler for
// requests that pass the filter, on add and on update, and for
// EnqueueMatching, and never for the others.
func TestHandlerSeesWhatPassesTheFilter(t *testing.T) {
	wanted := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "wanted", Labels: map[string]string{"pick": "yes"}}}
	other := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "other"}}
	client := fake.NewSimpleClientset(wanted, other)
	factory := informers.NewSharedInformerFactory(client, 0)
	var mu sync.Mutex
	seen := map[string]int{}
	c := New("test", factory.Certificates().V1alpha1().CertificateSigningRequests(),
		func(csr *certv1alpha1.CertificateSigningRequest) bool { return csr.Labels["pick"] == "yes" },
		func(_ context.Context, csr *certv1alpha1.CertificateSigningRequest) error {
			mu.Lock()
			seen[csr.Name]++
			mu.Unlock()
			return nil
		})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	go c.Run(ctx, 2)
	count := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return seen[name]
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("%s: seen %v", what, seen)
		}
	}
	waitFor("the wanted request on add", func() bool { return count("wanted") == 1 })

	// Picked up after an update makes it pass the filter.
	picked := other.DeepCopy()
	picked.Labels = map[string]string{"pick": "yes"}
	if _, err := client.CertificatesV1alpha1().CertificateSigningRequests().Update(ctx, picked, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the other request once it passes the filter", func() bool { return count("other") == 1 })

	c.EnqueueMatching(func(csr *certv1alpha1.CertificateSigningRequest) bool { return csr.Name == "wanted" })
	waitFor("the wanted request again after EnqueueMatching", func() bool { return count("wanted") == 2 })
	if count("other") != 1 {
		t.Fatalf("EnqueueMatching queued a request it did not match: %v", seen)
	}
}
