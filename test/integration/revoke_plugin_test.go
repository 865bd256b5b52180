package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

// TestKubectlRekeyRevoke runs the plugin against a standalone server: a
// request's certificate is revoked (the Revocation named by its SHA-256,
// with the server-found status), revoking it again is success, a pending
// request is an error that says it has no certificate, and a certificate
// named by serial number is revoked under its SHA-256 as well.
func TestKubectlRekeyRevoke(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	plugin := framework.Binary(t, "kubectl-rekey")
	env := []string{"PATH=" + filepath.Dir(plugin) + string(os.PathListSeparator) + os.Getenv("PATH")}
	run := func(args ...string) (string, string, error) {
		return framework.RunKubectlWithEnv(t, srv.Kubeconfig, env, nil, append([]string{"rekey", "revoke"}, args...)...)
	}
	const signer = "rekey.io/kube-apiserver-client"
	issue := func(name string) (string, string) {
		createAndApprove(t, srv.Client, requestFor(t, name, signer, fixtures.CSROptions{CommonName: name}, certv1alpha1.UsageClientAuth))
		csr := waitFor(t, srv.Client, name, signTimeout, issued)
		certs, err := validation.ParseCertificateChain(csr.Status.Certificate)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(certs[0].Raw)
		return hex.EncodeToString(sum[:]), certs[0].SerialNumber.Text(16)
	}
	aliceSHA, _ := issue("revoke-alice")
	bobSHA, bobSerial := issue("revoke-bob")

	out, errOut, err := run("revoke-alice", "--reason", "key-compromise")
	if want := "revocation.certificates.rekey.io/" + aliceSHA + " revoked (KeyCompromise)"; err != nil || !strings.Contains(out, want) {
		t.Fatalf("revoke: %v\nout %q, want %q\nerr %s", err, out, want, errOut)
	}
	rev, err := srv.Client.CertificatesV1alpha1().Revocations().Get(context.Background(), aliceSHA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rev.Spec.Reason != certv1alpha1.RevocationReasonKeyCompromise || rev.Status.Request != "revoke-alice" || rev.Status.SignerName != signer || rev.Status.RevokedBy == "" {
		t.Fatalf("revocation %+v", rev)
	}

	out, errOut, err = run("revoke-alice")
	if err != nil || !strings.Contains(out, aliceSHA+" already revoked (KeyCompromise, at ") {
		t.Fatalf("revoking again: %v\nout %q\nerr %s", err, out, errOut)
	}

	if _, err := srv.Client.CertificatesV1alpha1().CertificateSigningRequests().Create(context.Background(),
		requestFor(t, "revoke-pending", signer, fixtures.CSROptions{CommonName: "pending"}, certv1alpha1.UsageClientAuth), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, errOut, err = run("revoke-pending")
	if err == nil || !strings.Contains(errOut, "revoke-pending has no certificate") {
		t.Fatalf("a pending request: %v\nerr %s", err, errOut)
	}

	// By serial number, with -o name: the server names the object.
	out, errOut, err = run("--serial", bobSerial, "-o", "name")
	if want := "revocation.certificates.rekey.io/" + bobSHA + "\n"; err != nil || out != want {
		t.Fatalf("by serial: %v\nout %q, want %q\nerr %s", err, out, want, errOut)
	}

	// A certificate rekey did not issue: the server's 404, as an error.
	_, errOut, err = run("--sha256", strings.Repeat("ab", 32))
	if err == nil || !strings.Contains(errOut, "no certificate rekey issued") {
		t.Fatalf("an unknown certificate: %v\nerr %s", err, errOut)
	}
}
