package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

func TestSignerDefaultsToManualApproval(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	s := &Signer{}
	scheme.Default(s)
	if s.Spec.Approval.Mode != ApprovalManual {
		t.Fatalf("approval mode %q, want Manual", s.Spec.Approval.Mode)
	}
	s.Spec.Approval.Mode = ApprovalNodeClient
	scheme.Default(s)
	if s.Spec.Approval.Mode != ApprovalNodeClient {
		t.Fatal("defaulting overwrote a mode that was set")
	}
}

func TestFieldSelectors(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	gvk := SchemeGroupVersion.WithKind("CertificateSigningRequest")
	if _, _, err := scheme.ConvertFieldLabel(gvk, SignerNameField, "example.com/x"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := scheme.ConvertFieldLabel(gvk, "spec.username", "alice"); err == nil || !strings.Contains(err.Error(), SignerNameField) {
		t.Fatalf("unsupported field: %v", err)
	}
}
