package csrevents

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
)

func request(name string, conditions ...certv1alpha1.CertificateSigningRequestCondition) *certv1alpha1.CertificateSigningRequest {
	return &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec:       certv1alpha1.CertificateSigningRequestSpec{SignerName: "example.com/s", Request: []byte("a large request")},
		Status:     certv1alpha1.CertificateSigningRequestStatus{Conditions: conditions, Certificate: []byte("a certificate")},
	}
}

func condition(t certv1alpha1.RequestConditionType, reason, message string) certv1alpha1.CertificateSigningRequestCondition {
	return certv1alpha1.CertificateSigningRequestCondition{Type: t, Status: metav1.ConditionTrue, Reason: reason, Message: message}
}

// TestEventsFollowDecisions: each decision a request gets after the
// leader started is one event, with the rule of a failure in its
// message; what requests already had at the start is not recorded again.
func TestEventsFollowDecisions(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	approved := condition(certv1alpha1.CertificateApproved, "AutoApproved", "the node's own client certificate")
	client := fake.NewSimpleClientset(request("before", approved))
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(Trim))
	informer := factory.Certificates().V1alpha1().CertificateSigningRequests().Informer()
	events := record.NewFakeRecorder(10)
	if err := (Handler{Events: events}).Register(informer); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("informer did not sync")
	}
	csrs := client.CertificatesV1alpha1().CertificateSigningRequests()
	next := func(want string) {
		t.Helper()
		select {
		case got := <-events.Events:
			if got != want {
				t.Fatalf("event %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event, want %q", want)
		}
	}

	pending := request("later")
	pending.Status.Certificate = nil
	if _, err := csrs.Create(ctx, pending, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pending.Status.Conditions = []certv1alpha1.CertificateSigningRequestCondition{approved}
	if _, err := csrs.UpdateStatus(ctx, pending, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	next("Normal Approved AutoApproved: the node's own client certificate")
	pending.Status.Conditions = append(pending.Status.Conditions, condition(certv1alpha1.CertificateFailed, "SignerPolicyViolation",
		`policy.allowedUsages: usage "server auth" is not allowed; allowed: "client auth"`))
	if _, err := csrs.UpdateStatus(ctx, pending, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	next(`Warning Failed SignerPolicyViolation: policy.allowedUsages: usage "server auth" is not allowed; allowed: "client auth"`)

	// Approved and issued in its create: both.
	if _, err := csrs.Create(ctx, request("at-create", approved, condition(certv1alpha1.CertificateIssued, "CertificateIssued", "issued by \"CN=ca\"")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	next("Normal Approved AutoApproved: the node's own client certificate")
	next(`Normal Issued CertificateIssued: issued by "CN=ca"`)

	select {
	case got := <-events.Events:
		t.Fatalf("unexpected event %q (the request decided before the start is not recorded again)", got)
	default:
	}
	for _, obj := range informer.GetStore().List() {
		csr := obj.(*certv1alpha1.CertificateSigningRequest)
		if len(csr.Spec.Request) > 0 || len(csr.Status.Certificate) > 0 {
			t.Fatalf("the informer holds %s whole", csr.Name)
		}
	}
}

func TestEventMessage(t *testing.T) {
	for _, tc := range []struct{ reason, message, want string }{
		{"R", "m", "R: m"}, {"R", "", "R"}, {"", "m", "m"},
	} {
		if got := eventMessage(&certv1alpha1.CertificateSigningRequestCondition{Reason: tc.reason, Message: tc.message}); got != tc.want {
			t.Errorf("eventMessage(%q, %q) = %q, want %q", tc.reason, tc.message, got, tc.want)
		}
	}
	long := strings.Repeat("x", 4096)
	h := Handler{Events: record.NewFakeRecorder(1)}
	h.record(nil, request("r", condition(certv1alpha1.CertificateFailed, "R", long)))
	if got := <-h.Events.(*record.FakeRecorder).Events; len(got) >= len(long) {
		t.Fatalf("an event message of %d bytes is not capped", len(got))
	}
}
