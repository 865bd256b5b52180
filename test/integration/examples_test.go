package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/test/framework"
)

// TestExampleManifestsAreAccepted creates every example in
// artifacts/examples with kubectl, and checks that the example CA, signer
// and request together produce a certificate, so the documentation cannot
// drift from the API.
func TestExampleManifestsAreAccepted(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	dir := filepath.Join(framework.RepoRoot(), "artifacts", "examples")
	for _, f := range []string{"ca.yaml", "signer.yaml"} {
		if out, errOut, err := framework.RunKubectl(t, srv.Kubeconfig, nil, "create", "-f", filepath.Join(dir, f)); err != nil {
			t.Fatalf("kubectl create -f %s: %v %s%s", f, err, out, errOut)
		}
	}
	// The RotatingCredential example is accepted; a standalone server has
	// no host cluster to keep its Secret in, and says so.
	if out, errOut, err := framework.RunKubectl(t, srv.Kubeconfig, nil, "create", "-f", filepath.Join(dir, "rotatingcredential.yaml")); err != nil {
		t.Fatalf("kubectl create -f rotatingcredential.yaml: %v %s%s", err, out, errOut)
	}
	framework.Eventually(t, 30*time.Second, "the standalone server reports NoHostCluster for the RotatingCredential example", func(ctx context.Context) error {
		rc, err := srv.Client.RotationV1alpha1().RotatingCredentials("team-a").Get(ctx, "db-password", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(rc.Status.Conditions, "Degraded"); c == nil || c.Reason != "NoHostCluster" {
			return fmt.Errorf("Degraded is %+v", c)
		}
		return nil
	})
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
			t.Fatalf("%s refused: %v", f, err)
		}
		current, err := srv.Client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), csr.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		addCondition(current, certv1alpha1.CertificateApproved, "Example")
		if _, err := srv.Client.CertificatesV1alpha1().CertificateSigningRequests().UpdateApproval(context.Background(), csr.Name, current, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		leaf := waitForCertificate(t, srv.Client, csr.Name)
		if leaf.Issuer.CommonName != "Team CA" {
			t.Fatalf("%s was signed by %q, want the example CA", f, leaf.Issuer.CommonName)
		}
	}
}
