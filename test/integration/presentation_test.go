package integration

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/ptr"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/registry/printers"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

// checkPresentation runs on the server of TestKubectlAgainstStandaloneServer
// (one server for both): `kubectl wait --for=condition=Issued` returns
// once a request is issued, and `kubectl get rcsr` (-o wide) shows the
// lifetime the Signer grants, NOTAFTER, ISSUER and SERIAL.
func checkPresentation(t *testing.T, srv *framework.Standalone) {
	t.Helper()
	ctx := context.Background()
	csrs := srv.Client.CertificatesV1alpha1().CertificateSigningRequests()
	// 400 days asked, 365 granted: the built-in signer's maxDuration.
	req := requestFor(t, "presented", "rekey.io/kube-apiserver-client", fixtures.CSROptions{CommonName: "presented"},
		certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth)
	req.Spec.ExpirationSeconds = ptr.To[int32](400 * 24 * 3600)
	created, err := csrs.Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	row := kubectlRow(t, srv, "presented")
	if row["REQUESTEDDURATION"] != "365d" || row["CONDITION"] != "Pending" || row["NOTAFTER"] != "<none>" {
		t.Fatalf("pending request: %v, want REQUESTEDDURATION 365d (the Signer's maxDuration), Pending, no NOTAFTER", row)
	}

	// kubectl wait, started before the approval, returns once the
	// certificate is there.
	type result struct {
		out, errOut string
		err         error
	}
	waited := make(chan result, 1)
	go func() {
		out, errOut, err := framework.RunKubectl(t, srv.Kubeconfig, nil, "wait", "--for=condition=Issued", "--timeout=60s", "certificatesigningrequest.certificates.rekey.io/presented")
		waited <- result{out, errOut, err}
	}()
	addCondition(created, certv1alpha1.CertificateApproved, "Test")
	if _, err := csrs.UpdateApproval(ctx, "presented", created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-waited:
		if r.err != nil || !strings.Contains(r.out, "condition met") {
			t.Fatalf("kubectl wait --for=condition=Issued: %v\n%s%s", r.err, r.out, r.errOut)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("kubectl wait --for=condition=Issued did not return")
	}

	issued, err := csrs.Get(ctx, "presented", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(issued.Status.Certificate)
	if block == nil {
		t.Fatalf("no certificate after Issued: %s", statusOf(issued))
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if c := certv1alpha1.GetCondition(issued, certv1alpha1.CertificateIssued); c == nil || !strings.Contains(c.Message, "serial "+printers.SerialHex(cert.SerialNumber)) {
		t.Fatalf("Issued condition %+v does not name serial %s", c, printers.SerialHex(cert.SerialNumber))
	}
	row = kubectlRow(t, srv, "presented", "-o", "wide")
	want := map[string]string{
		"CONDITION": "Approved,Issued", "NOTAFTER": cert.NotAfter.UTC().Format(time.RFC3339),
		"ISSUER": cert.Issuer.CommonName, "SERIAL": printers.SerialHex(cert.SerialNumber),
	}
	for k, v := range want {
		if row[k] != v {
			t.Errorf("kubectl get rcsr -o wide: %s = %q, want %q (row %v)", k, row[k], v, row)
		}
	}
	// The certificate's own lifetime, from when it was issued (notBefore
	// is backdated): the 365 days granted, or less if the CA ends sooner.
	issuedAt := certv1alpha1.GetCondition(issued, certv1alpha1.CertificateIssued).LastTransitionTime.Time
	if d, want := row["REQUESTEDDURATION"], duration.HumanDuration(cert.NotAfter.Sub(issuedAt).Round(time.Minute)); d != want {
		t.Errorf("issued request: REQUESTEDDURATION %q, want the certificate's lifetime %q", d, want)
	}
}

// kubectlRow is one request's row of `kubectl get rcsr NAME`, by column.
func kubectlRow(t *testing.T, srv *framework.Standalone, name string, flags ...string) map[string]string {
	t.Helper()
	out, errOut, err := framework.RunKubectl(t, srv.Kubeconfig, nil, append([]string{"get", "rcsr", name}, flags...)...)
	if err != nil {
		t.Fatalf("kubectl get rcsr %s: %v\n%s", name, err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("kubectl get rcsr %s printed:\n%s", name, out)
	}
	// Columns are apart by at least three spaces; a cell may hold one (an
	// issuer's common name).
	columns := regexp.MustCompile(`\s{2,}`)
	header, cells := columns.Split(strings.TrimSpace(lines[0]), -1), columns.Split(strings.TrimSpace(lines[1]), -1)
	if len(header) != len(cells) {
		t.Fatalf("kubectl get rcsr %s: %d columns, %d cells:\n%s", name, len(header), len(cells), out)
	}
	row := map[string]string{}
	for i, h := range header {
		row[h] = cells[i]
	}
	return row
}
