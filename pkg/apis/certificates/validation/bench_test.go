package validation

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/test/fixtures"
)

// BenchmarkValidateCreate is the create path: parse, signature check and
// every field rule of a typical client certificate request.
func BenchmarkValidateCreate(b *testing.B) {
	csr := &certificates.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: certificates.CertificateSigningRequestSpec{
			Request:    fixtures.CSRPEM(b, fixtures.CSROptions{CommonName: "bench", Organizations: []string{"dev"}}),
			SignerName: "rekey.io/kube-apiserver-client",
			Usages:     []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageClientAuth},
		},
	}
	b.ReportAllocs()
	for b.Loop() {
		if errs := ValidateCertificateSigningRequestCreate(csr); len(errs) != 0 {
			b.Fatal(errs)
		}
	}
}

func BenchmarkParseCSR(b *testing.B) {
	req := fixtures.CSRPEM(b, fixtures.CSROptions{CommonName: "bench"})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseCSR(req); err != nil {
			b.Fatal(err)
		}
	}
}
