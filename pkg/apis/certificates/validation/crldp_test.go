package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/apis/certificates"
)

func TestValidateSignerCRLDistributionPoints(t *testing.T) {
	signer := func(points ...string) *certificates.Signer {
		return &certificates.Signer{
			ObjectMeta: metav1.ObjectMeta{Name: "example.com:client"},
			Spec: certificates.SignerSpec{SignerName: "example.com/client", CertificateAuthorityRef: certificates.CertificateAuthorityReference{Name: "ca"},
				Policy:   certificates.SignerPolicy{MaxDuration: metav1.Duration{Duration: time.Hour}, CRLDistributionPoints: points},
				Approval: certificates.SignerApproval{Mode: certificates.ApprovalManual}},
		}
	}
	const f = "spec.policy.crlDistributionPoints"
	long := "https://rekey.example.com/" + strings.Repeat("a", MaxCRLDistributionPointLength)
	tests := map[string]struct {
		points   []string
		field    string // empty: valid
		contains string
	}{
		"none":                    {},
		"both variables":          {points: []string{"https://rekey.example.com/crl/$(caName)/$(keyID)"}},
		"http, port, query":       {points: []string{"http://10.0.0.1:8080/crl/$(caName)?key=$(keyID)"}},
		"variable in the host":    {points: []string{"https://$(caName).crl.example.com/$(keyID).crl"}},
		"four":                    {points: []string{"http://a/1", "http://a/2", "http://a/3", "http://a/4"}},
		"exactly the longest":     {points: []string{long[:MaxCRLDistributionPointLength]}},
		"five":                    {points: []string{"http://a/1", "http://a/2", "http://a/3", "http://a/4", "http://a/5"}, field: f, contains: "must have at most 4 items"},
		"too long":                {points: []string{long}, field: f + "[0]", contains: "Too long"},
		"duplicate":               {points: []string{"http://a/1", "http://a/1"}, field: f + "[1]", contains: "Duplicate"},
		"ldap":                    {points: []string{"ldap://ldap.example.com/cn=crl"}, field: f + "[0]", contains: "http or https"},
		"relative":                {points: []string{"/crl/$(caName)"}, field: f + "[0]", contains: "http or https"},
		"no host":                 {points: []string{"https:///crl"}, field: f + "[0]", contains: "must name a host"},
		"port without host":       {points: []string{"https://:8443/crl"}, field: f + "[0]", contains: "must name a host"},
		"user information":        {points: []string{"https://user:secret@rekey.example.com/crl"}, field: f + "[0]", contains: "user information"},
		"fragment":                {points: []string{"https://rekey.example.com/crl#x"}, field: f + "[0]", contains: "fragment"},
		"unknown variable":        {points: []string{"https://rekey.example.com/crl/$(namespace)"}, field: f + "[0]", contains: "unknown variable; use $(caName), $(keyID)"},
		"unterminated variable":   {points: []string{"https://rekey.example.com/crl/$(caName"}, field: f + "[0]", contains: "unknown variable"},
		"space":                   {points: []string{"https://rekey.example.com/a crl"}, field: f + "[0]", contains: "ASCII without spaces"},
		"not ASCII":               {points: []string{"https://rekey.example.com/crl/ä"}, field: f + "[0]", contains: "ASCII"},
		"control character":       {points: []string{"https://rekey.example.com/\x7f"}, field: f + "[0]", contains: "ASCII"},
		"not a URL":               {points: []string{"http://[::1/crl"}, field: f + "[0]", contains: "must be a URL"},
		"second entry named":      {points: []string{"http://a/1", "ftp://a/2"}, field: f + "[1]", contains: "http or https"},
		"upper-case scheme is ok": {points: []string{"HTTPS://rekey.example.com/crl"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			errs := ValidateSigner(signer(tc.points...))
			if tc.field == "" {
				if len(errs) != 0 {
					t.Fatalf("refused %q: %v", tc.points, errs)
				}
				return
			}
			requireError(t, errs, tc.field, tc.contains)
		})
	}
}

func TestExpandCRLDistributionPoint(t *testing.T) {
	for _, tc := range []struct{ template, ca, key, want string }{
		{"https://r/crl/$(caName)/$(keyID)", "kube-client", "ca-1a2b", "https://r/crl/kube-client/ca-1a2b"},
		{"https://$(caName).r/$(keyID).crl?k=$(keyID)", "c", "k", "https://c.r/k.crl?k=k"},
		{"https://r/crl/$(caName)/$(keyID)", "files", "file:SHA256:ab", "https://r/crl/files/file:SHA256:ab"},
		{"https://r/fixed.crl", "c", "k", "https://r/fixed.crl"},
	} {
		if got := ExpandCRLDistributionPoint(tc.template, tc.ca, tc.key); got != tc.want {
			t.Errorf("ExpandCRLDistributionPoint(%q, %q, %q) = %q, want %q", tc.template, tc.ca, tc.key, got, tc.want)
		}
	}
}
