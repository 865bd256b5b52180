package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/test/framework"
)

// TestExampleManifestsAreAccepted creates every CSR example in
// artifacts/examples, so the documentation cannot drift from the API.
func TestExampleManifestsAreAccepted(t *testing.T) {
	srv := framework.StartStandalone(t, t.TempDir())
	files, err := filepath.Glob(filepath.Join(framework.RepoRoot(), "artifacts", "examples", "csr*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var csr certv1alpha1.CertificateSigningRequest
		if err := yaml.UnmarshalStrict(data, &csr); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, err := srv.Client.CertificatesV1alpha1().CertificateSigningRequests().Create(context.Background(), &csr, metav1.CreateOptions{}); err != nil {
			t.Errorf("%s refused: %v", f, err)
		}
	}
}
