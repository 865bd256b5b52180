package validation

import (
	"testing"

	"rekey.io/rekey/test/fixtures"
)

// FuzzParseCSR checks that no input makes the request parser panic, and that
// whatever it accepts has a verified signature and fits the size cap.
func FuzzParseCSR(f *testing.F) {
	good := fixtures.CSRPEM(f, fixtures.CSROptions{CommonName: "seed", DNSNames: []string{"a.example.com"}})
	f.Add(good)
	f.Add(fixtures.CorruptSignature(f, good))
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\n\n-----END CERTIFICATE REQUEST-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		csr, err := ParseCSR(data)
		if err != nil {
			return
		}
		if len(data) > MaxRequestBytes {
			t.Fatalf("accepted %d bytes, over the cap", len(data))
		}
		if err := csr.CheckSignature(); err != nil {
			t.Fatalf("accepted a request whose signature does not verify: %v", err)
		}
	})
}

// FuzzParseCertificateChain checks the status.certificate parser the same way.
func FuzzParseCertificateChain(f *testing.F) {
	cert := fixtures.SelfSignedCertPEM(f, "seed")
	f.Add(cert)
	f.Add(append([]byte("text before\n"), cert...))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		certs, err := ParseCertificateChain(data)
		if err != nil {
			return
		}
		if len(certs) == 0 || len(certs) > MaxCertificateBlocks {
			t.Fatalf("accepted %d certificates", len(certs))
		}
	})
}
