package certificatesigningrequest

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/test/fixtures"
)

// fakeSigners is a Signer storage holding some Signers.
type fakeSigners map[string]*certificates.Signer

func (f fakeSigners) Get(_ context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	if s, ok := f[name]; ok {
		return s, nil
	}
	return nil, errNotFound
}

type notFound struct{}

func (notFound) Error() string { return "not found" }

var errNotFound = notFound{}

func cells(t *testing.T, signers *signerLookup, csr *certificates.CertificateSigningRequest) map[string]interface{} {
	t.Helper()
	table, err := newTable(signers).ConvertToTable(context.Background(), csr, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]interface{}{}
	for i, c := range table.ColumnDefinitions {
		got[c.Name] = table.Rows[0].Cells[i]
		if (c.Name == "Issuer" || c.Name == "Serial") != (c.Priority == 1) {
			t.Errorf("column %s has priority %d", c.Name, c.Priority)
		}
	}
	return got
}

// TestTable: REQUESTEDDURATION is the lifetime granted (the Signer's cap,
// then the certificate's own), CONDITION shows a condition that is not
// True, NOTAFTER, ISSUER and SERIAL come from the certificate.
func TestTable(t *testing.T) {
	day := int32(86400)
	signers := &signerLookup{}
	var g SignerGetter = fakeSigners{"example.com:signer": {Spec: certificates.SignerSpec{SignerName: "example.com/signer",
		Policy: certificates.SignerPolicy{MaxDuration: metav1.Duration{Duration: 2 * time.Hour}}}}}

	pending := newCSR(t)
	pending.Spec.ExpirationSeconds = &day
	if got := cells(t, signers, pending); got["RequestedDuration"] != "24h" || got["Condition"] != "Pending" || got["NotAfter"] != "<none>" || got["Serial"] != "<none>" {
		t.Errorf("pending, no Signer known: %v", got)
	}
	signers.getter.Store(&g)
	if got := cells(t, signers, pending); got["RequestedDuration"] != "120m" {
		t.Errorf("pending, Signer's maxDuration 2h: REQUESTEDDURATION %v", got["RequestedDuration"])
	}
	pending.Spec.ExpirationSeconds = nil
	if got := cells(t, signers, pending); got["RequestedDuration"] != "120m" {
		t.Errorf("pending, nothing requested: REQUESTEDDURATION %v, want the Signer's maxDuration", got["RequestedDuration"])
	}
	other := newCSR(t)
	other.Spec.SignerName = "elsewhere.example/signer"
	if got := cells(t, signers, other); got["RequestedDuration"] != "<none>" {
		t.Errorf("a signer rekey does not serve, nothing requested: %v", got["RequestedDuration"])
	}

	certPEM := fixtures.SelfSignedCertPEM(t, "issuing-ca")
	cert := firstCertificate(certPEM)
	issued := newCSR(t)
	issued.Spec.ExpirationSeconds = &day
	issued.Status.Certificate = certPEM
	issued.Status.Conditions = []certificates.CertificateSigningRequestCondition{
		{Type: certificates.CertificateAttested, Status: metav1.ConditionFalse},
		{Type: certificates.CertificateApproved, Status: metav1.ConditionTrue},
		issuedCondition(certPEM, metav1.NewTime(cert.NotAfter.Add(-50*time.Minute))),
	}
	got := cells(t, signers, issued)
	want := map[string]interface{}{
		"RequestedDuration": "50m", "Condition": "Attested=False,Approved,Issued",
		"NotAfter": cert.NotAfter.UTC().Format(time.RFC3339), "Issuer": "issuing-ca", "Serial": cert.SerialNumber.Text(16),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("issued: %s = %v, want %v", k, got[k], v)
		}
	}
}
