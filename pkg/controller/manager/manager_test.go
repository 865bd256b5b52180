package manager

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
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
	if string(got.Spec.Request) != "req" {
		t.Error("the request of an unsigned request was dropped; the signer needs it")
	}
	issued := pending.DeepCopy()
	issued.Status.Certificate = []byte("cert")
	out, err = TrimForCache(issued)
	if err != nil {
		t.Fatal(err)
	}
	got = out.(*certv1alpha1.CertificateSigningRequest)
	if got.Spec.Request != nil || string(got.Status.Certificate) != "cert" {
		t.Errorf("issued request: request %q, certificate %q", got.Spec.Request, got.Status.Certificate)
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
