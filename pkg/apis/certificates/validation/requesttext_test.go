package validation

import (
	"testing"

	"rekey.io/rekey/test/fixtures"
)

// TestValidateRequestRefusesControlCharacters: a subject attribute or SAN
// with a control or bidirectional formatting character is refused at
// create, naming the attribute and the character (review #32 finding 1);
// ordinary non-ASCII text is not.
func TestValidateRequestRefusesControlCharacters(t *testing.T) {
	tests := map[string]struct {
		opts     fixtures.CSROptions
		contains string // empty: accepted
	}{
		"ESC in the common name":  {opts: fixtures.CSROptions{CommonName: "system:admin\x1b[2K\rCN=alice"}, contains: "subject attribute commonName holds U+001B"},
		"CR in an organization":   {opts: fixtures.CSROptions{CommonName: "alice", Organizations: []string{"dev", "system:masters\r"}}, contains: "subject attribute organization holds U+000D"},
		"C1 control in the CN":    {opts: fixtures.CSROptions{CommonName: "alice\u009b2K"}, contains: "commonName holds U+009B"},
		"right-to-left override":  {opts: fixtures.CSROptions{CommonName: "alice\u202egpj.exe"}, contains: "commonName holds U+202E"},
		"ESC in a DNS SAN":        {opts: fixtures.CSROptions{CommonName: "web", DNSNames: []string{"ok.example.com", "a\x1b]0;x\x07.example.com"}}, contains: "DNS subject alternative name 1 holds U+001B"},
		"non-ASCII name accepted": {opts: fixtures.CSROptions{CommonName: "Jürgen Groß", Organizations: []string{"équipe"}}},
		"spaces accepted":         {opts: fixtures.CSROptions{CommonName: "alice smith", DNSNames: []string{"a.example.com"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			csr := validCSR(t)
			csr.Spec.Request = fixtures.CSRPEM(t, tc.opts)
			errs := ValidateCertificateSigningRequestCreate(csr)
			if tc.contains == "" {
				if len(errs) != 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			requireError(t, errs, "spec.request", tc.contains)
		})
	}
}
