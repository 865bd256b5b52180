package policy

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/test/fixtures"
)

type req struct {
	cn string
	ou []string
	// user is the requester (spec.username); empty means the common name.
	user   string
	key    crypto.Signer
	orgs   []string
	dns    []string
	ips    []net.IP
	emails []string
	uris   []*url.URL
	ca     bool
	usages []certv1alpha1.KeyUsage
}

func build(t testing.TB, r req) (*certv1alpha1.CertificateSigningRequestSpec, *x509.CertificateRequest) {
	t.Helper()
	tmpl := &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: r.cn, Organization: r.orgs, OrganizationalUnit: r.ou},
		DNSNames: r.dns, IPAddresses: r.ips, EmailAddresses: r.emails, URIs: r.uris,
	}
	if r.ca {
		val, err := asn1.Marshal(struct{ IsCA bool }{true})
		if err != nil {
			t.Fatal(err)
		}
		tmpl.ExtraExtensions = []pkix.Extension{{Id: oidBasicConstraints, Critical: true, Value: val}}
	}
	key := r.key
	if key == nil {
		key = fixtures.NewKey(t)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	user := r.user
	if user == "" {
		user = r.cn
	}
	return &certv1alpha1.CertificateSigningRequestSpec{Usages: r.usages, Username: user}, parsed
}

var (
	ds, ke, ca, sa = certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth, certv1alpha1.UsageServerAuth
	clientU        = []certv1alpha1.KeyUsage{ke, ds, ca}
	servingU       = []certv1alpha1.KeyUsage{ke, ds, sa}
	someURL, _     = url.Parse("spiffe://cluster/ns/x")
	nodeOrgs       = []string{"system:nodes"}
)

func runCases(t *testing.T, p certv1alpha1.SignerPolicy, cases map[string]struct {
	r        req
	wantRule string
}) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec, parsed := build(t, tc.r)
			_, err := Evaluate(&p, spec, parsed)
			if tc.wantRule == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var v *Violation
			if !errors.As(err, &v) {
				t.Fatalf("want a violation of %s, got %v", tc.wantRule, err)
			}
			if v.Rule != tc.wantRule {
				t.Fatalf("violated %s (%v), want %s", v.Rule, v, tc.wantRule)
			}
		})
	}
}

// kubernetes.io/kube-apiserver-client in seed 003: any subject, URI, DNS, IP
// and Email SANs honored, usages must include client auth and nothing beyond
// digital signature, key encipherment, client auth; no CA bit.
func TestKubeAPIServerClientPolicy(t *testing.T) {
	runCases(t, KubeAPIServerClientPolicy, map[string]struct {
		r        req
		wantRule string
	}{
		"any subject":                 {r: req{cn: "alice", orgs: []string{"dev", "ops"}, usages: clientU}},
		"client auth only":            {r: req{cn: "alice", usages: []certv1alpha1.KeyUsage{ca}}},
		"digital signature+client":    {r: req{cn: "alice", usages: []certv1alpha1.KeyUsage{ds, ca}}},
		"all SAN types honored":       {r: req{cn: "a", dns: []string{"a.example.com"}, ips: []net.IP{net.ParseIP("10.0.0.1")}, emails: []string{"a@example.com"}, uris: []*url.URL{someURL}, usages: clientU}},
		"missing client auth":         {r: req{cn: "a", usages: []certv1alpha1.KeyUsage{ds, ke}}, wantRule: "policy.requiredUsages"},
		"server auth beyond the set":  {r: req{cn: "a", usages: []certv1alpha1.KeyUsage{ds, ca, sa}}, wantRule: "policy.allowedUsages"},
		"code signing beyond the set": {r: req{cn: "a", usages: []certv1alpha1.KeyUsage{ca, certv1alpha1.UsageCodeSigning}}, wantRule: "policy.allowedUsages"},
		"CA bit requested":            {r: req{cn: "a", ca: true, usages: clientU}, wantRule: "policy.caBit"},
		"system:masters":              {r: req{cn: "a", orgs: []string{"system:masters"}, usages: clientU}, wantRule: "subject.organizations"},
	})
}

// kubernetes.io/kube-apiserver-client-kubelet: organizations exactly
// system:nodes, CN system:node:<name>, no SANs, usages exactly key
// encipherment, digital signature, client auth; no CA bit.
func TestKubeletClientPolicy(t *testing.T) {
	runCases(t, KubeletClientPolicy, map[string]struct {
		r        req
		wantRule string
	}{
		"node client":               {r: req{cn: "system:node:n1", orgs: nodeOrgs, usages: clientU}},
		"usages in another order":   {r: req{cn: "system:node:n1", orgs: nodeOrgs, usages: []certv1alpha1.KeyUsage{ca, ds, ke}}},
		"CN without prefix":         {r: req{cn: "n1", orgs: nodeOrgs, usages: clientU}, wantRule: "policy.subject.commonNamePrefix"},
		"CN only the prefix":        {r: req{cn: "system:node:", orgs: nodeOrgs, usages: clientU}, wantRule: "policy.subject.commonNamePrefix"},
		"no organization":           {r: req{cn: "system:node:n1", usages: clientU}, wantRule: "policy.subject.organizations"},
		"extra organization":        {r: req{cn: "system:node:n1", orgs: []string{"system:nodes", "dev"}, usages: clientU}, wantRule: "policy.subject.organizations"},
		"system:masters":            {r: req{cn: "system:node:n1", orgs: []string{"system:nodes", "system:masters"}, usages: clientU}, wantRule: "subject.organizations"},
		"bootstrap user for a node": {r: req{cn: "system:node:n1", user: "system:bootstrap:abcdef", orgs: nodeOrgs, usages: clientU}},
		"other organization":        {r: req{cn: "system:node:n1", orgs: []string{"nodes"}, usages: clientU}, wantRule: "policy.subject.organizations"},
		"DNS SAN":                   {r: req{cn: "system:node:n1", orgs: nodeOrgs, dns: []string{"n1"}, usages: clientU}, wantRule: "policy.subjectAltNames.allowed"},
		"IP SAN":                    {r: req{cn: "system:node:n1", orgs: nodeOrgs, ips: []net.IP{net.ParseIP("10.0.0.1")}, usages: clientU}, wantRule: "policy.subjectAltNames.allowed"},
		"Email SAN":                 {r: req{cn: "system:node:n1", orgs: nodeOrgs, emails: []string{"n@x"}, usages: clientU}, wantRule: "policy.subjectAltNames.allowed"},
		"URI SAN":                   {r: req{cn: "system:node:n1", orgs: nodeOrgs, uris: []*url.URL{someURL}, usages: clientU}, wantRule: "policy.subjectAltNames.allowed"},
		"missing key encipherment":  {r: req{cn: "system:node:n1", orgs: nodeOrgs, usages: []certv1alpha1.KeyUsage{ds, ca}}, wantRule: "policy.requiredUsages"},
		"server auth":               {r: req{cn: "system:node:n1", orgs: nodeOrgs, usages: []certv1alpha1.KeyUsage{ke, ds, ca, sa}}, wantRule: "policy.allowedUsages"},
		"CA bit":                    {r: req{cn: "system:node:n1", orgs: nodeOrgs, ca: true, usages: clientU}, wantRule: "policy.caBit"},
	})
}

// kubernetes.io/kubelet-serving: organizations exactly system:nodes, CN
// system:node:<name>, DNS and IP SANs allowed and at least one required, URI
// and Email not allowed, usages exactly key encipherment, digital signature,
// server auth; no CA bit.
func TestKubeletServingPolicy(t *testing.T) {
	runCases(t, KubeletServingPolicy, map[string]struct {
		r        req
		wantRule string
	}{
		"DNS SAN":             {r: req{cn: "system:node:n1", orgs: nodeOrgs, dns: []string{"n1.example.com"}, usages: servingU}},
		"IP SAN":              {r: req{cn: "system:node:n1", orgs: nodeOrgs, ips: []net.IP{net.ParseIP("10.0.0.1")}, usages: servingU}},
		"DNS and IP":          {r: req{cn: "system:node:n1", orgs: nodeOrgs, dns: []string{"n1"}, ips: []net.IP{net.ParseIP("::1")}, usages: servingU}},
		"no SAN":              {r: req{cn: "system:node:n1", orgs: nodeOrgs, usages: servingU}, wantRule: "policy.subjectAltNames.requireDNSOrIP"},
		"Email SAN":           {r: req{cn: "system:node:n1", orgs: nodeOrgs, dns: []string{"n1"}, emails: []string{"n@x"}, usages: servingU}, wantRule: "policy.subjectAltNames.allowed"},
		"URI SAN":             {r: req{cn: "system:node:n1", orgs: nodeOrgs, dns: []string{"n1"}, uris: []*url.URL{someURL}, usages: servingU}, wantRule: "policy.subjectAltNames.allowed"},
		"wrong CN":            {r: req{cn: "kubelet", orgs: nodeOrgs, dns: []string{"n1"}, usages: servingU}, wantRule: "policy.subject.commonNamePrefix"},
		"wrong organization":  {r: req{cn: "system:node:n1", orgs: []string{"x"}, dns: []string{"n1"}, usages: servingU}, wantRule: "policy.subject.organizations"},
		"client auth":         {r: req{cn: "system:node:n1", orgs: nodeOrgs, dns: []string{"n1"}, usages: []certv1alpha1.KeyUsage{ke, ds, sa, ca}}, wantRule: "policy.allowedUsages"},
		"missing server auth": {r: req{cn: "system:node:n1", orgs: nodeOrgs, dns: []string{"n1"}, usages: []certv1alpha1.KeyUsage{ke, ds}}, wantRule: "policy.requiredUsages"},
		"CA bit":              {r: req{cn: "system:node:n1", orgs: nodeOrgs, dns: []string{"n1"}, ca: true, usages: servingU}, wantRule: "policy.caBit"},
		"another node's name": {r: req{cn: "system:node:n2", user: "system:node:n1", orgs: nodeOrgs, dns: []string{"n2"}, usages: servingU}, wantRule: "policy.subject.commonNameIsRequester"},
		"not a node asking":   {r: req{cn: "system:node:n1", user: "mallory", orgs: nodeOrgs, dns: []string{"n1"}, usages: servingU}, wantRule: "policy.subject.commonNameIsRequester"},
		"wildcard DNS name":   {r: req{cn: "system:node:n1", orgs: nodeOrgs, dns: []string{"*.example.com"}, usages: servingU}, wantRule: "policy.subjectAltNames.allowWildcardDNSNames"},
		"extra attribute":     {r: req{cn: "system:node:n1", ou: []string{"ops"}, orgs: nodeOrgs, dns: []string{"n1"}, usages: servingU}, wantRule: "policy.subject.forbidOtherAttributes"},
	})
}

// Every policy, built in or declared, refuses weak keys with its own reason.
func TestWeakKeysAreRefused(t *testing.T) {
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p224, err := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsa2048, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	open := certv1alpha1.SignerPolicy{MaxDuration: KubeAPIServerClientPolicy.MaxDuration}
	for _, p := range []certv1alpha1.SignerPolicy{KubeAPIServerClientPolicy, open} {
		for name, key := range map[string]crypto.Signer{"RSA-1024": rsa1024, "P-224": p224} {
			spec, parsed := build(t, req{cn: "a", key: key, usages: []certv1alpha1.KeyUsage{ca}})
			_, err := Evaluate(&p, spec, parsed)
			var v *Violation
			if !errors.As(err, &v) || v.Rule != "publicKey" || v.Reason != ReasonWeakPublicKey {
				t.Errorf("%s: got %v, want a %s violation", name, err, ReasonWeakPublicKey)
			}
		}
		spec, parsed := build(t, req{cn: "a", key: rsa2048, usages: []certv1alpha1.KeyUsage{ca}})
		if _, err := Evaluate(&p, spec, parsed); err != nil {
			t.Errorf("RSA-2048 refused: %v", err)
		}
	}
}

// A declared policy cannot allow system:masters client certificates, even
// with no usage restriction: a certificate without extended key usages is
// valid for client authentication.
func TestPrivilegedGroupRefusedByEveryPolicy(t *testing.T) {
	open := certv1alpha1.SignerPolicy{MaxDuration: KubeAPIServerClientPolicy.MaxDuration}
	for name, usages := range map[string][]certv1alpha1.KeyUsage{
		"client auth": {ca}, "any": {certv1alpha1.UsageAny}, "no EKU": {ds},
	} {
		spec, parsed := build(t, req{cn: "a", orgs: []string{"system:masters"}, usages: usages})
		if _, err := Evaluate(&open, spec, parsed); err == nil || !strings.Contains(err.Error(), "system:masters") {
			t.Errorf("%s: %v", name, err)
		}
	}
	spec, parsed := build(t, req{cn: "a", orgs: []string{"system:masters"}, usages: []certv1alpha1.KeyUsage{sa}})
	if _, err := Evaluate(&open, spec, parsed); err != nil {
		t.Errorf("server certificate refused: %v", err)
	}
}

// Lifetime: the minimum of the request and the signer's maximum.
func TestDurationIsTheMinimumOfRequestAndPolicy(t *testing.T) {
	p := KubeAPIServerClientPolicy
	spec, parsed := build(t, req{cn: "a", usages: clientU})
	for _, tc := range []struct {
		requested *int32
		want      time.Duration
	}{
		{nil, BuiltInMaxDuration},
		{ptr.To[int32](3600), time.Hour},
		{ptr.To[int32](int32((2 * BuiltInMaxDuration).Seconds())), BuiltInMaxDuration},
	} {
		spec.ExpirationSeconds = tc.requested
		d, err := Evaluate(&p, spec, parsed)
		if err != nil || d.Duration != tc.want {
			t.Errorf("requested %v: got %v, %v; want %v", tc.requested, d.Duration, err, tc.want)
		}
	}
}

func TestCertSignUsageIsRefused(t *testing.T) {
	p := certv1alpha1.SignerPolicy{MaxDuration: KubeAPIServerClientPolicy.MaxDuration}
	spec, parsed := build(t, req{cn: "a", usages: []certv1alpha1.KeyUsage{certv1alpha1.UsageCertSign}})
	_, err := Evaluate(&p, spec, parsed)
	if err == nil || !strings.Contains(err.Error(), "policy.caBit") {
		t.Fatalf("cert sign usage: %v", err)
	}
}

func TestBuiltInsAreValid(t *testing.T) {
	names := map[string]bool{}
	for _, b := range BuiltIns(false, false) {
		if names[b.Signer.Spec.SignerName] {
			t.Errorf("duplicate %s", b.Signer.Spec.SignerName)
		}
		names[b.Signer.Spec.SignerName] = true
		if b.Signer.Spec.CertificateAuthorityRef.Name != b.CA.Name {
			t.Errorf("%s refers to CA %s, not its own %s", b.Signer.Name, b.Signer.Spec.CertificateAuthorityRef.Name, b.CA.Name)
		}
	}
	if len(names) != 5 {
		t.Fatalf("%d built-in signers, want 5", len(names))
	}
	withTest := BuiltIns(false, true)
	if len(withTest) != 6 || withTest[5].Signer.Spec.SignerName != InsecureTestSignerName || withTest[5].Signer.Spec.Approval.Mode != certv1alpha1.ApprovalAttestation {
		t.Fatalf("with the insecure test signer enabled: %d signers, last %s", len(withTest), withTest[len(withTest)-1].Signer.Spec.SignerName)
	}
}

// kubelet-serving approves against the Node only where Nodes can be read.
func TestKubeletServingApprovalDependsOnTheHostCluster(t *testing.T) {
	mode := func(hostCluster bool) certv1alpha1.ApprovalMode {
		for _, b := range BuiltIns(hostCluster, false) {
			if b.Signer.Spec.SignerName == "rekey.io/kubelet-serving" {
				return b.Signer.Spec.Approval.Mode
			}
		}
		t.Fatal("no rekey.io/kubelet-serving")
		return ""
	}
	if mode(true) != certv1alpha1.ApprovalNodeServing || mode(false) != certv1alpha1.ApprovalManual {
		t.Fatalf("with a host cluster %s, without %s", mode(true), mode(false))
	}
}

// TestViolationsQuoteTheSubjectBriefly: a refusal names the rule and
// quotes only the start of a requester's 20,000-character subject
// attribute or name, never the whole of it.
func TestViolationsQuoteTheSubjectBriefly(t *testing.T) {
	huge := strings.Repeat("é", 20000)
	for name, tc := range map[string]struct {
		p certv1alpha1.SignerPolicy
		r req
	}{
		"common name prefix":     {KubeletClientPolicy, req{cn: huge, orgs: nodeOrgs, usages: clientU}},
		"common name requester":  {KubeletServingPolicy, req{cn: "system:node:" + huge, user: "system:node:n1", orgs: nodeOrgs, dns: []string{"n1"}, usages: []certv1alpha1.KeyUsage{ke, ds, sa}}},
		"organizations":          {KubeletClientPolicy, req{cn: "system:node:n1", orgs: []string{huge}, usages: clientU}},
		"forbidden organization": {certv1alpha1.SignerPolicy{Subject: certv1alpha1.SubjectPolicy{ForbiddenOrganizations: []string{huge}}}, req{cn: "a", orgs: []string{huge}, usages: clientU}},
		"wildcard DNS name":      {certv1alpha1.SignerPolicy{SubjectAltNames: certv1alpha1.SubjectAltNamePolicy{Allowed: []certv1alpha1.SubjectAltNameType{certv1alpha1.SANTypeDNS}}}, req{cn: "a", dns: []string{"*." + strings.Repeat("a", 20000)}, usages: clientU}},
	} {
		t.Run(name, func(t *testing.T) {
			spec, parsed := build(t, tc.r)
			_, err := Evaluate(&tc.p, spec, parsed)
			var v *Violation
			if !errors.As(err, &v) || len(v.Message) > 1024 {
				t.Fatalf("violation of %d bytes: %.300v", len(fmt.Sprint(err)), err)
			}
		})
	}
}

// forbidOtherAttributes names the attribute as the person wrote it in
// -subj (OU), not only by its OID (2.5.4.11).
func TestForbidOtherAttributesNamesTheAttribute(t *testing.T) {
	spec, parsed := build(t, req{cn: "system:node:n1", ou: []string{"ops"}, orgs: []string{"system:nodes"}, dns: []string{"n1"},
		usages: []certv1alpha1.KeyUsage{certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageServerAuth}})
	_, err := Evaluate(&KubeletServingPolicy, spec, parsed)
	var v *Violation
	if !errors.As(err, &v) {
		t.Fatalf("want a Violation, got %v", err)
	}
	const want = "subject attribute OU (2.5.4.11) is not allowed; only the common name and organizations are"
	if v.Rule != "policy.subject.forbidOtherAttributes" || v.Message != want {
		t.Errorf("got %s: %q, want policy.subject.forbidOtherAttributes: %q", v.Rule, v.Message, want)
	}
}
