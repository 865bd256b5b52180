package signer

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/serveridentity"
)

func newSigner() *certificates.Signer {
	return &certificates.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: "example.com:team", ResourceVersion: "1", Generation: 1},
		Spec: certificates.SignerSpec{SignerName: "example.com/team", CertificateAuthorityRef: certificates.CertificateAuthorityReference{Name: "team-ca"},
			Policy:   certificates.SignerPolicy{MaxDuration: metav1.Duration{Duration: time.Hour}},
			Approval: certificates.SignerApproval{Mode: certificates.ApprovalManual}},
	}
}

func TestSignerStrategy(t *testing.T) {
	s := NewStrategy(runtime.NewScheme())
	created := newSigner()
	created.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}
	s.PrepareForCreate(context.Background(), created)
	if created.Status.Conditions != nil {
		t.Fatal("status kept on create")
	}
	if errs := s.Validate(context.Background(), created); len(errs) != 0 {
		t.Fatalf("valid Signer refused: %v", errs)
	}
	old := newSigner()
	updated := old.DeepCopy()
	updated.Spec.Policy.MaxDuration.Duration = 2 * time.Hour
	s.PrepareForUpdate(context.Background(), updated, old)
	if updated.Generation != 2 {
		t.Errorf("generation %d after a spec change, want 2", updated.Generation)
	}
	moved := old.DeepCopy()
	moved.Spec.CertificateAuthorityRef.Name = "rekey.io-kube-apiserver-client"
	if errs := s.ValidateUpdate(context.Background(), moved, old); len(errs) == 0 {
		t.Fatal("the CA of a Signer changed on update")
	}
}

func TestSignerStatusIsTheControllersAlone(t *testing.T) {
	s := NewStatusStrategy(NewStrategy(runtime.NewScheme()))
	old := newSigner()
	updated := old.DeepCopy()
	updated.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Forged", LastTransitionTime: metav1.Now()}}
	updated.Spec.SignerName = "example.com/other"
	s.PrepareForUpdate(context.Background(), updated, old)
	if updated.Spec.SignerName != "example.com/team" {
		t.Fatal("spec changed through /status")
	}
	if errs := s.ValidateUpdate(context.Background(), updated, old); len(errs) != 1 || errs[0].Field != "status" {
		t.Fatalf("a client's status write: %v", errs)
	}
	id, err := serveridentity.New()
	if err != nil {
		t.Fatal(err)
	}
	if errs := s.ValidateUpdate(id.WithUser(context.Background()), updated, old); len(errs) != 0 {
		t.Fatalf("the controllers' status write: %v", errs)
	}
	updated.Status.Conditions[0].Reason = ""
	if errs := s.ValidateUpdate(id.WithUser(context.Background()), updated, old); len(errs) == 0 {
		t.Fatal("a condition without a reason was accepted")
	}
}
