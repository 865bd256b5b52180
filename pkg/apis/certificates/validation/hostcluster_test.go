package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"rekey.io/rekey/pkg/apis/certificates"
)

// hostSigner is a valid Signer serving both host cluster APIs; mutate
// changes it before validation.
func hostSigner(mutate func(*certificates.Signer)) *certificates.Signer {
	s := &certificates.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: "team.example.com:app"},
		Spec: certificates.SignerSpec{
			SignerName:              "team.example.com/app",
			CertificateAuthorityRef: certificates.CertificateAuthorityReference{Name: "ca"},
			Policy: certificates.SignerPolicy{
				MaxDuration:     metav1.Duration{Duration: 48 * time.Hour},
				SubjectAltNames: certificates.SubjectAltNamePolicy{Allowed: []certificates.SubjectAltNameType{certificates.SANTypeDNS, certificates.SANTypeURI}},
			},
			Approval: certificates.SignerApproval{Mode: certificates.ApprovalManual},
			HostCluster: &certificates.HostClusterServing{
				CertificateSigningRequests: true,
				PodCertificateRequests: &certificates.PodCertificatePolicy{
					Allowed:           []certificates.PodCertificateSubjects{{Namespace: "team", ServiceAccounts: []string{"web", "*"}}, {Namespace: "*"}},
					SPIFFETrustDomain: "cluster.example.com",
					CommonName:        "$(serviceAccount).$(namespace)",
					DNSNames:          []string{"$(serviceAccount).$(namespace).svc", "$(podName).pods.example.com", "$(nodeName).nodes.example.com"},
					KeyTypes:          []certificates.PodCertificateKeyType{certificates.PodCertificateKeyECDSAP256, certificates.PodCertificateKeyED25519},
					Usages:            []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageClientAuth},
					Duration:          &metav1.Duration{Duration: time.Hour},
				},
			},
		},
	}
	if mutate != nil {
		mutate(s)
	}
	return s
}

func pcr(s *certificates.Signer) *certificates.PodCertificatePolicy {
	return s.Spec.HostCluster.PodCertificateRequests
}

func TestValidateHostCluster(t *testing.T) {
	const p = "spec.hostCluster.podCertificateRequests"
	tests := map[string]struct {
		mutate   func(*certificates.Signer)
		field    string // empty: valid
		contains string
	}{
		"valid":                  {},
		"no hostCluster":         {mutate: func(s *certificates.Signer) { s.Spec.HostCluster = nil }},
		"native CSRs only":       {mutate: func(s *certificates.Signer) { s.Spec.HostCluster.PodCertificateRequests = nil }},
		"native CSRs NodeClient": {mutate: func(s *certificates.Signer) { s.Spec.Approval.Mode = certificates.ApprovalNodeClient }},
		"kubelet signer, native CSRs": {mutate: func(s *certificates.Signer) {
			s.Name, s.Spec.SignerName = "kubernetes.io:kubelet-serving", "kubernetes.io/kubelet-serving"
			s.Spec.Approval.Mode = certificates.ApprovalNodeServing
			s.Spec.HostCluster.PodCertificateRequests = nil
		}},
		"minimal pod policy": {mutate: func(s *certificates.Signer) {
			s.Spec.HostCluster.PodCertificateRequests = &certificates.PodCertificatePolicy{Allowed: []certificates.PodCertificateSubjects{{Namespace: "team"}}}
		}},
		"usages within allowedUsages": {mutate: func(s *certificates.Signer) {
			s.Spec.Policy.AllowedUsages = []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageClientAuth}
		}},

		"SPIFFE ID without URI SANs allowed": {mutate: func(s *certificates.Signer) {
			s.Spec.Policy.SubjectAltNames.Allowed = []certificates.SubjectAltNameType{certificates.SANTypeDNS}
		}, field: "spec.hostCluster.podCertificateRequests.spiffeTrustDomain", contains: "must include URI"},
		"DNS templates without DNS SANs allowed": {mutate: func(s *certificates.Signer) {
			s.Spec.Policy.SubjectAltNames.Allowed = []certificates.SubjectAltNameType{certificates.SANTypeURI}
		}, field: "spec.hostCluster.podCertificateRequests.dnsNames", contains: "must include DNS"},
		"Attestation with native CSRs": {mutate: func(s *certificates.Signer) { s.Spec.Approval.Mode = certificates.ApprovalAttestation },
			field: "spec.hostCluster.certificateSigningRequests", contains: "evidence"},
		"Attestation with pod certificates only": {mutate: func(s *certificates.Signer) {
			s.Spec.Approval.Mode = certificates.ApprovalAttestation
			s.Spec.HostCluster.CertificateSigningRequests = false
		}},
		"kubernetes.io signer for pods": {mutate: func(s *certificates.Signer) {
			s.Name, s.Spec.SignerName = "kubernetes.io:app", "kubernetes.io/app"
		}, field: p, contains: "reserved to Kubernetes"},
		"a kubernetes.io subdomain for pods": {mutate: func(s *certificates.Signer) {
			s.Name, s.Spec.SignerName = "x.kubernetes.io:app", "x.kubernetes.io/app"
		}, field: p, contains: "reserved to Kubernetes"},
		"no allowed": {mutate: func(s *certificates.Signer) { pcr(s).Allowed = nil }, field: p + ".allowed", contains: "Required"},
		"too many allowed": {mutate: func(s *certificates.Signer) {
			pcr(s).Allowed = make([]certificates.PodCertificateSubjects, 65)
			for i := range pcr(s).Allowed {
				pcr(s).Allowed[i].Namespace = "team"
			}
		}, field: p + ".allowed", contains: "must have at most 64"},
		"bad namespace":                   {mutate: func(s *certificates.Signer) { pcr(s).Allowed[1].Namespace = "Team_A" }, field: p + ".allowed[1].namespace", contains: `"*" for every namespace`},
		"empty namespace":                 {mutate: func(s *certificates.Signer) { pcr(s).Allowed[1].Namespace = "" }, field: p + ".allowed[1].namespace", contains: "Invalid"},
		"bad service account":             {mutate: func(s *certificates.Signer) { pcr(s).Allowed[0].ServiceAccounts[0] = "Web!" }, field: p + ".allowed[0].serviceAccounts[0]", contains: `"*" for every service account`},
		"too many service accounts":       {mutate: func(s *certificates.Signer) { pcr(s).Allowed[0].ServiceAccounts = make([]string, 65) }, field: p + ".allowed[0].serviceAccounts", contains: "must have at most 64"},
		"bad trust domain":                {mutate: func(s *certificates.Signer) { pcr(s).SPIFFETrustDomain = "spiffe://cluster" }, field: p + ".spiffeTrustDomain", contains: "Invalid"},
		"unknown variable in common name": {mutate: func(s *certificates.Signer) { pcr(s).CommonName = "$(pod)" }, field: p + ".commonName", contains: "$(namespace), $(serviceAccount), $(podName), $(nodeName)"},
		"unclosed variable":               {mutate: func(s *certificates.Signer) { pcr(s).CommonName = "x-$(namespace" }, field: p + ".commonName", contains: "unknown variable"},
		"a later unknown variable":        {mutate: func(s *certificates.Signer) { pcr(s).CommonName = "$(namespace)-$(uid)" }, field: p + ".commonName", contains: "unknown variable"},
		"common name too long":            {mutate: func(s *certificates.Signer) { pcr(s).CommonName = strings.Repeat("a", 65) }, field: p + ".commonName", contains: "more than 64"},
		"too many DNS names":              {mutate: func(s *certificates.Signer) { pcr(s).DNSNames = make([]string, 17) }, field: p + ".dnsNames", contains: "must have at most 16"},
		"unknown variable in a DNS name":  {mutate: func(s *certificates.Signer) { pcr(s).DNSNames[2] = "$(node).example.com" }, field: p + ".dnsNames[2]", contains: "unknown variable"},
		"a DNS name that cannot be one":   {mutate: func(s *certificates.Signer) { pcr(s).DNSNames[1] = "$(podName)_pods.example.com" }, field: p + ".dnsNames[1]", contains: "RFC 1123"},
		"a wildcard DNS name":             {mutate: func(s *certificates.Signer) { pcr(s).DNSNames[0] = "*.$(namespace).svc" }, field: p + ".dnsNames[0]", contains: "RFC 1123"},
		"DNS name too long":               {mutate: func(s *certificates.Signer) { pcr(s).DNSNames[0] = strings.Repeat("a.", 127) + "ab" }, field: p + ".dnsNames[0]", contains: "more than 253"},
		"unknown key type":                {mutate: func(s *certificates.Signer) { pcr(s).KeyTypes[1] = "RSA2048" }, field: p + ".keyTypes[1]", contains: "ECDSAP256"},
		"unknown usage":                   {mutate: func(s *certificates.Signer) { pcr(s).Usages[1] = "teleport" }, field: p + ".usages[1]", contains: "Unsupported"},
		"usage outside allowedUsages": {mutate: func(s *certificates.Signer) {
			s.Spec.Policy.AllowedUsages = []certificates.KeyUsage{certificates.UsageDigitalSignature}
		}, field: p + ".usages[1]", contains: "spec.policy.allowedUsages"},
		"duration under 1h":         {mutate: func(s *certificates.Signer) { pcr(s).Duration.Duration = 59 * time.Minute }, field: p + ".duration", contains: "at least 1h"},
		"duration over maxDuration": {mutate: func(s *certificates.Signer) { pcr(s).Duration.Duration = 49 * time.Hour }, field: p + ".duration", contains: "spec.policy.maxDuration"},
		"maxDuration under 1h": {mutate: func(s *certificates.Signer) {
			s.Spec.Policy.MaxDuration.Duration = 30 * time.Minute
			pcr(s).Duration = nil
		}, field: "spec.policy.maxDuration", contains: "at least 1h to serve PodCertificateRequests"},
		"maxDuration under 1h without pod certificates": {mutate: func(s *certificates.Signer) {
			s.Spec.Policy.MaxDuration.Duration = 30 * time.Minute
			s.Spec.HostCluster.PodCertificateRequests = nil
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			errs := ValidateSigner(hostSigner(tc.mutate))
			if tc.field == "" {
				if len(errs) != 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			requireError(t, errs, tc.field, tc.contains)
		})
	}
}

// TestValidateTemplate covers the template checker on its own: every $(
// must open a known variable, whatever surrounds it.
func TestValidateTemplate(t *testing.T) {
	path := field.NewPath("t")
	for tmpl, valid := range map[string]bool{
		"":                                true,
		"plain":                           true,
		"$(namespace)":                    true,
		"$(namespace)$(serviceAccount)":   true,
		"a-$(podName)-b-$(nodeName)":      true,
		"$":                               true,
		"$namespace":                      true,
		"$(":                              false,
		"$(Namespace)":                    false,
		"$(namespace":                     false,
		"$($(namespace))":                 false,
		"$(namespace)$(":                  false,
		"x$(serviceaccount)":              false,
		"$(podName)$(nodeName)$(unknown)": false,
	} {
		errs := validateTemplate(path, tmpl, 64)
		if valid != (len(errs) == 0) {
			t.Errorf("validateTemplate(%q) = %v, want valid=%v", tmpl, errs, valid)
		}
		for _, e := range errs {
			if e.Field != "t" {
				t.Errorf("validateTemplate(%q) named field %q", tmpl, e.Field)
			}
		}
	}
	if errs := validateTemplate(path, strings.Repeat("a", 11), 10); len(errs) != 1 || errs[0].Type != field.ErrorTypeTooLong {
		t.Errorf("an 11-byte template with limit 10: %v", errs)
	}
}

// TestExpandTemplate: each variable is replaced once, and values are never
// expanded again (a pod named "$(namespace)" stays that).
func TestExpandTemplate(t *testing.T) {
	for tmpl, want := range map[string]string{
		"":                                   "",
		"$(serviceAccount).$(namespace).svc": "web.team.svc",
		"$(podName)@$(nodeName)":             "$(namespace)@node-1",
		"$(namespace)-$(namespace)":          "team-team",
		"$(unknown)":                         "$(unknown)",
	} {
		if got := ExpandTemplate(tmpl, "team", "web", "$(namespace)", "node-1"); got != want {
			t.Errorf("ExpandTemplate(%q) = %q, want %q", tmpl, got, want)
		}
	}
}
