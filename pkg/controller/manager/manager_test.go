package manager

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
)

func TestTrimForCacheKeepsWhatTheControllersRead(t *testing.T) {
	pending := &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}}},
		Spec:       certv1alpha1.CertificateSigningRequestSpec{Request: []byte("req")},
		Status: certv1alpha1.CertificateSigningRequestStatus{Conditions: []certv1alpha1.CertificateSigningRequestCondition{
			{Type: certv1alpha1.CertificateApproved, Status: "True"}}},
	}
	out, err := TrimForCache(pending)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*certv1alpha1.CertificateSigningRequest)
	if got.ManagedFields != nil {
		t.Error("managed fields kept")
	}
	if string(got.Spec.Request) != "req" || len(got.Status.Conditions) != 1 {
		t.Error("the request or its conditions were dropped; the signer needs them")
	}
}

// TestControllersWatchOnlyWhatTheyActOn: the approver's and signer's
// informers select by state.
func TestControllersWatchOnlyWhatTheyActOn(t *testing.T) {
	client := fake.NewSimpleClientset()
	for _, state := range []string{certv1alpha1.StatePending, certv1alpha1.StateApproved} {
		f := csrFactory(client, state)
		f.Certificates().V1alpha1().CertificateSigningRequests().Informer()
		ctx, cancel := context.WithCancel(context.Background())
		f.Start(ctx.Done())
		f.WaitForCacheSync(ctx.Done())
		cancel()
		f.Shutdown()
	}
	var selectors []string
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" {
			selectors = append(selectors, a.(k8stesting.ListActionImpl).GetListRestrictions().Fields.String())
		}
	}
	if strings.Join(selectors, " ") != "state=Pending state=Approved" {
		t.Fatalf("listed with field selectors %q, want state=Pending and state=Approved", selectors)
	}
}

// TestReadinessFailsWhenControllersCannotStart: a replica whose controllers
// cannot run must not report ready.
func TestReadinessFailsWhenControllersCannotStart(t *testing.T) {
	m := New(Options{})
	if err := m.Check(nil); err != nil {
		t.Fatalf("not started yet: %v", err)
	}
	m.Run(context.Background(), &rest.Config{Host: "https://127.0.0.1:1"})
	if err := m.Check(nil); err == nil || !strings.Contains(err.Error(), "etcd") {
		t.Fatalf("Check = %v, want a failure naming etcd", err)
	}
}
