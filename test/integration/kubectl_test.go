package integration

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

func TestKubectlAgainstStandaloneServer(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	checkVersionsAndWhoAmI(t, srv)
	manifest := fmt.Sprintf(`apiVersion: certificates.rekey.io/v1alpha1
kind: CertificateSigningRequest
metadata:
  name: from-kubectl
spec:
  signerName: example.com/kubectl
  expirationSeconds: 7200
  usages: ["digital signature", "client auth"]
  username: system:admin
  request: %s
`, base64.StdEncoding.EncodeToString(fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "kubectl-user"})))

	out, errOut, err := framework.RunKubectl(t, srv.Kubeconfig, []byte(manifest), "create", "-f", "-")
	if err != nil || !strings.Contains(out, "certificatesigningrequest.certificates.rekey.io/from-kubectl created") {
		t.Fatalf("kubectl create: %v\n%s%s", err, out, errOut)
	}
	// Created, but nothing will sign it: kubectl prints the server's warning.
	if want := `Warning: no Signer serves signerName "example.com/kubectl": nothing will sign this request until one does`; !strings.Contains(errOut, want) {
		t.Errorf("kubectl create of a request no Signer serves: stderr lacks %q:\n%s", want, errOut)
	}

	out, errOut, err = framework.RunKubectl(t, srv.Kubeconfig, nil, "get", "rcsr")
	if err != nil {
		t.Fatalf("kubectl get rcsr: %v\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("kubectl get rcsr printed %d lines:\n%s", len(lines), out)
	}
	header := strings.Fields(lines[0])
	wantHeader := []string{"NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION", "NOTAFTER"}
	if strings.Join(header, " ") != strings.Join(wantHeader, " ") {
		t.Fatalf("columns = %v, want %v", header, wantHeader)
	}
	row := strings.Fields(lines[1])
	if row[0] != "from-kubectl" || row[2] != "example.com/kubectl" || row[3] != "rekey-admin" || row[4] != "120m" || row[5] != "Pending" || row[6] != "<none>" {
		t.Fatalf("row = %v", row)
	}

	out, errOut, err = framework.RunKubectl(t, srv.Kubeconfig, nil, "explain", "rcsr.spec", "--api-version=certificates.rekey.io/v1alpha1")
	if err != nil {
		t.Fatalf("kubectl explain: %v\n%s", err, errOut)
	}
	for _, want := range []string{"KIND:", "CertificateSigningRequest", "signerName", "expirationSeconds", "usages", "request"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl explain output lacks %q:\n%s", want, out)
		}
	}

	out, errOut, err = framework.RunKubectl(t, srv.Kubeconfig, nil, "get", "rekey", "-o", "name")
	if err != nil {
		t.Fatalf("kubectl get rekey (category): %v %s", err, errOut)
	}
	for _, want := range []string{
		"certificatesigningrequest.certificates.rekey.io/from-kubectl",
		"signer.certificates.rekey.io/rekey.io:kube-apiserver-client",
		"certificateauthority.rotation.rekey.io/rekey.io-kube-apiserver-client",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl get rekey lacks %s:\n%s", want, out)
		}
	}

	checkPresentation(t, srv)

	out, errOut, err = framework.RunKubectl(t, srv.Kubeconfig, nil, "delete", "rcsr", "from-kubectl")
	if err != nil || !strings.Contains(out, "deleted") {
		t.Fatalf("kubectl delete: %v\n%s%s", err, out, errOut)
	}
}
