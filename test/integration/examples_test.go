package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
		// Server-side apply after create: the durations in the file are
		// what the server stores, so kubectl-create and the applier agree
		// on every field instead of conflicting (docs/api.md, kubectl apply).
		if out, errOut, err := framework.RunKubectl(t, srv.Kubeconfig, nil, "apply", "--server-side", "-f", filepath.Join(dir, f)); err != nil {
			t.Fatalf("kubectl apply --server-side -f %s after create: %v %s%s", f, err, out, errOut)
		}
	}
	// Client-side apply of the whole directory, twice: the second reports
	// every object unchanged (issue #32: a duration written "720h" came
	// back as "720h0m0s" and every apply patched it again). The
	// RotatingCredential example is accepted; a standalone server has no
	// host cluster to keep its Secret in, and says so below.
	if out, errOut, err := framework.RunKubectl(t, srv.Kubeconfig, nil, "apply", "-f", dir); err != nil {
		t.Fatalf("kubectl apply -f %s: %v %s%s", dir, err, out, errOut)
	}
	out, errOut, err := framework.RunKubectl(t, srv.Kubeconfig, nil, "apply", "-f", dir)
	if err != nil {
		t.Fatalf("kubectl apply -f %s (again): %v %s%s", dir, err, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("the second apply printed %d lines, want one per example (4):\n%s%s", len(lines), out, errOut)
	}
	for _, l := range lines {
		if !strings.HasSuffix(l, " unchanged") {
			t.Errorf("the second apply of the examples changed something: %q\n%s", l, out)
		}
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
		// kubectl apply above created it.
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
