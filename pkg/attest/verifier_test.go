package attest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"math/big"
	"net"
	"strconv"
	"testing"
	"time"
)

type fixture struct {
	t      *testing.T
	v      *Verifier
	store  *MemoryStore
	now    time.Time
	akKey  *ecdsa.PrivateKey
	akArea []byte
	ekArea []byte
	ekFP   string
	pcrs   map[int][]byte
}

func pcrVal(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func newFixture(t *testing.T, tofu bool) *fixture {
	t.Helper()
	f := &fixture{t: t, store: NewMemoryStore(), now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	f.akKey, f.akArea = newAK(t)
	f.ekArea = rsaEK(t)
	_, key, err := ParseEKPublic(f.ekArea)
	if err != nil {
		t.Fatal(err)
	}
	f.ekFP, _ = Fingerprint(key)
	f.pcrs = map[int][]byte{0: pcrVal(1), 7: pcrVal(7)}
	f.v = &Verifier{Store: f.store, Now: func() time.Time { return f.now }, Policy: Policy{
		Name: "p", AllowedEKs: map[string]bool{f.ekFP: true}, PCRs: f.pcrs, TrustOnFirstUse: tofu,
		ChallengeLifetime: 5 * time.Minute, MaxAttemptsPerHour: 3,
	}}
	return f
}

// challenge asks for a challenge and, standing in for the TPM's
// ActivateCredential, puts a known secret in its place.
func (f *fixture) challenge(node string) []byte {
	f.t.Helper()
	if _, _, err := f.v.Challenge(context.Background(), ChallengeRequest{Node: node, EKPublic: f.ekArea, AKPublic: f.akArea}); err != nil {
		f.t.Fatal(err)
	}
	c, _ := f.store.GetChallenge(context.Background(), node)
	secret := bytes.Repeat([]byte{byte(len(node))}, SecretSize)
	c.SecretHash = SecretHash(secret)
	_ = f.store.PutChallenge(context.Background(), node, *c)
	return secret
}

// request is a CSR for node with evidence quoting values.
func (f *fixture) request(cn string, secret []byte, values map[int][]byte, mutate func(*x509.CertificateRequest)) *Request {
	f.t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}}}
	if mutate != nil {
		mutate(tmpl)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		f.t.Fatal(err)
	}
	csr, _ := x509.ParseCertificateRequest(der)
	spki, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	q, sig := quote(f.t, f.akKey, QualifyingData(secret, spki), values, nil)
	reported := map[string][]byte{}
	for i, v := range values {
		reported[strconv.Itoa(i)] = v
	}
	return &Request{CSR: csr, Evidence: &EvidenceV1{Version: EvidenceVersionV1, Secret: secret, Quote: q, Signature: sig, PCRBank: "sha256", PCRs: reported}}
}

func reason(err error) string {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Reason
	}
	if err == nil {
		return ""
	}
	return "error: " + err.Error()
}

func TestVerifyRequestFixedPolicy(t *testing.T) {
	f := newFixture(t, false)
	ctx := context.Background()

	secret := f.challenge("n1")
	req := f.request("system:node:n1", secret, f.pcrs, nil)
	got, err := f.v.VerifyRequest(ctx, "n1", ClientRequest, req)
	if err != nil {
		t.Fatal(err)
	}
	if got.EKFingerprint != f.ekFP || !got.FirstUse || got.Policy != "p" || len(got.PCRs) != 2 {
		t.Fatalf("attested %+v", got)
	}
	if b, _ := f.store.BindingForEK(ctx, f.ekFP); b == nil || b.Node != "n1" {
		t.Fatalf("EK not bound to n1: %+v", b)
	}
	// The same evidence again: the challenge is spent.
	if r := reason(func() error { _, err := f.v.VerifyRequest(ctx, "n1", ClientRequest, req); return err }()); r != "NoChallenge" {
		t.Fatalf("replayed evidence: %s", r)
	}

	for name, tc := range map[string]struct {
		req    func(secret []byte) *Request
		before func()
		want   string
	}{
		"evidence copied to another CSR": {req: func(secret []byte) *Request {
			a, b := f.request("system:node:n1", secret, f.pcrs, nil), f.request("system:node:n1", secret, f.pcrs, nil)
			b.Evidence = a.Evidence
			return b
		}, want: "QuoteRefused"},
		"expired challenge": {req: func(secret []byte) *Request { return f.request("system:node:n1", secret, f.pcrs, nil) },
			before: func() { f.now = f.now.Add(6 * time.Minute) }, want: "ChallengeExpired"},
		"wrong secret": {req: func([]byte) *Request { return f.request("system:node:n1", pcrVal(9), f.pcrs, nil) }, want: "WrongSecret"},
		"changed PCR": {req: func(secret []byte) *Request {
			return f.request("system:node:n1", secret, map[int][]byte{0: pcrVal(1), 7: pcrVal(8)}, nil)
		}, want: "PCRMismatch"},
		"more PCRs quoted": {req: func(secret []byte) *Request {
			return f.request("system:node:n1", secret, map[int][]byte{0: pcrVal(1), 7: pcrVal(7), 8: pcrVal(8)}, nil)
		}, want: "QuoteRefused"},
		"another node's name": {req: func(secret []byte) *Request { return f.request("system:node:n2", secret, f.pcrs, nil) }, want: "WrongSubject"},
		"a SAN": {req: func(secret []byte) *Request {
			return f.request("system:node:n1", secret, f.pcrs, func(c *x509.CertificateRequest) { c.IPAddresses = []net.IP{net.ParseIP("10.0.0.1")} })
		}, want: "WrongSubject"},
		"policy changed since the challenge": {req: func(secret []byte) *Request { return f.request("system:node:n1", secret, f.pcrs, nil) },
			before: func() { f.v.Policy.Name = "other" }, want: "PolicyChanged"},
		"no evidence": {req: func(secret []byte) *Request {
			r := f.request("system:node:n1", secret, f.pcrs, nil)
			r.Evidence = nil
			return r
		}, want: "NoEvidence"},
	} {
		t.Run(name, func(t *testing.T) {
			f.now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
			f.v.Policy.Name = "p"
			f.store.attempts = map[string][]time.Time{}
			secret := f.challenge("n1")
			if tc.before != nil {
				tc.before()
			}
			_, err := f.v.VerifyRequest(ctx, "n1", ClientRequest, tc.req(secret))
			if r := reason(err); r != tc.want {
				t.Fatalf("refusal %q (%v), want %q", r, err, tc.want)
			}
		})
	}
}

func TestVerifyRequestTrustOnFirstUse(t *testing.T) {
	f := newFixture(t, true)
	ctx := context.Background()
	first := map[int][]byte{0: pcrVal(3), 7: pcrVal(4)}
	if _, err := f.v.VerifyRequest(ctx, "n1", ClientRequest, f.request("system:node:n1", f.challenge("n1"), first, nil)); err != nil {
		t.Fatal(err)
	}
	if b, _ := f.store.BindingForNode(ctx, "n1"); b == nil || !bytes.Equal(b.PCRs[7], pcrVal(4)) {
		t.Fatalf("first values not recorded: %+v", b)
	}
	// The same values later: accepted, not a first use.
	got, err := f.v.VerifyRequest(ctx, "n1", ClientRequest, f.request("system:node:n1", f.challenge("n1"), first, nil))
	if err != nil || got.FirstUse {
		t.Fatalf("second attestation: %+v %v", got, err)
	}
	// A changed value: refused.
	_, err = f.v.VerifyRequest(ctx, "n1", ClientRequest, f.request("system:node:n1", f.challenge("n1"), map[int][]byte{0: pcrVal(3), 7: pcrVal(5)}, nil))
	if r := reason(err); r != "PCRMismatch" {
		t.Fatalf("changed PCR after first use: %s", r)
	}
}

func TestChallengeRefusals(t *testing.T) {
	ctx := context.Background()

	f := newFixture(t, false)
	c, fp, err := f.v.Challenge(ctx, ChallengeRequest{Node: "n1", EKPublic: f.ekArea, AKPublic: f.akArea})
	if err != nil || fp != f.ekFP || c.Secret != nil || len(c.CredentialBlob) == 0 {
		t.Fatalf("challenge %+v %s %v", c, fp, err)
	}
	stored, _ := f.store.GetChallenge(ctx, "n1")
	if stored == nil || len(stored.SecretHash) != 32 || !stored.Expires.Equal(f.now.Add(5*time.Minute)) {
		t.Fatalf("stored %+v", stored)
	}

	// Bound EK and node.
	_ = f.store.Bind(ctx, Binding{Node: "n1", EKFingerprint: f.ekFP})
	if _, _, err := f.v.Challenge(ctx, ChallengeRequest{Node: "n2", EKPublic: f.ekArea, AKPublic: f.akArea}); reason(err) != "EKBoundToAnotherNode" {
		t.Fatalf("same EK, other node: %v", err)
	}
	otherEK := rsaEK(t)
	_, otherKey, _ := ParseEKPublic(otherEK)
	otherFP, _ := Fingerprint(otherKey)
	f.v.Policy.AllowedEKs[otherFP] = true
	if _, _, err := f.v.Challenge(ctx, ChallengeRequest{Node: "n1", EKPublic: otherEK, AKPublic: f.akArea}); reason(err) != "NodeBoundToAnotherEK" {
		t.Fatalf("second EK for a bound node: %v", err)
	}

	// Outside the policy, and too many attempts.
	f = newFixture(t, false)
	if _, _, err := f.v.Challenge(ctx, ChallengeRequest{Node: "n1", EKPublic: otherEK, AKPublic: f.akArea}); reason(err) != "EKNotTrusted" {
		t.Fatalf("EK outside the policy: %v", err)
	}
	for i := 1; i <= 3; i++ {
		if _, _, err := f.v.Challenge(ctx, ChallengeRequest{Node: "n1", EKPublic: f.ekArea, AKPublic: f.akArea}); err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	if _, _, err := f.v.Challenge(ctx, ChallengeRequest{Node: "n1", EKPublic: f.ekArea, AKPublic: f.akArea}); reason(err) != "TooManyAttempts" {
		t.Fatalf("fourth attempt in the hour: %v", err)
	}
	f.now = f.now.Add(61 * time.Minute)
	if _, _, err := f.v.Challenge(ctx, ChallengeRequest{Node: "n1", EKPublic: f.ekArea, AKPublic: f.akArea}); err != nil {
		t.Fatalf("an hour later: %v", err)
	}
}

// An EK certificate from the policy's roots, for this EK, with the EK
// usage: accepted; one naming another key is refused.
func TestChallengeEKCertificate(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	f.v.Policy.AllowedEKs = nil
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "EK root"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: f.now.Add(-time.Hour), NotAfter: f.now.Add(time.Hour)}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	ca, _ := x509.ParseCertificate(caDER)
	f.v.Policy.Roots = x509.NewCertPool()
	f.v.Policy.Roots.AddCert(ca)
	ekCert := func(pub crypto.PublicKey) []byte {
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), NotBefore: f.now.Add(-time.Hour), NotAfter: f.now.Add(time.Hour),
			KeyUsage: x509.KeyUsageKeyEncipherment, UnknownExtKeyUsage: []asn1.ObjectIdentifier{oidEKCertificate}}, ca, pub, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return append(der, make([]byte, 40)...) // NV padding
	}
	_, ekKey, _ := ParseEKPublic(f.ekArea)
	if _, _, err := f.v.Challenge(ctx, ChallengeRequest{Node: "n1", EKCertificate: ekCert(ekKey), EKPublic: f.ekArea, AKPublic: f.akArea}); err != nil {
		t.Fatal(err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	if _, _, err := f.v.Challenge(ctx, ChallengeRequest{Node: "n1", EKCertificate: ekCert(&other.PublicKey), EKPublic: f.ekArea, AKPublic: f.akArea}); reason(err) != "EKMismatch" {
		t.Fatalf("certificate of another key: %v", err)
	}
}

func TestVerifyServingRequest(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	f.v.Policy.MaxAttemptsPerHour = 0
	withNames := func(c *x509.CertificateRequest) {
		c.DNSNames = []string{"n1.example.com"}
		c.IPAddresses = []net.IP{net.ParseIP("10.0.0.1")}
	}
	if _, err := f.v.VerifyRequest(ctx, "n1", ServingRequest, f.request("system:node:n1", f.challenge("n1"), f.pcrs, withNames)); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*x509.CertificateRequest){
		"no names":   nil,
		"an e-mail":  func(c *x509.CertificateRequest) { withNames(c); c.EmailAddresses = []string{"a@example.com"} },
		"other name": func(c *x509.CertificateRequest) { withNames(c); c.Subject.CommonName = "system:node:n2" },
	} {
		_, err := f.v.VerifyRequest(ctx, "n1", ServingRequest, f.request("system:node:n1", f.challenge("n1"), f.pcrs, mutate))
		if r := reason(err); r != "WrongSubject" {
			t.Errorf("%s: refusal %q (%v)", name, r, err)
		}
	}
}

// TestVerifyRequestSpendsOnlyOnSuccess: evidence that does not answer the
// challenge (a wrong secret, a quote that does not verify, a changed PCR,
// evidence for another key) leaves the challenge outstanding, so that
// whoever sends junk in a node's name cannot spend the node's challenge;
// the node's genuine answer afterwards passes and spends it.
func TestVerifyRequestSpendsOnlyOnSuccess(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	secret := f.challenge("n1")
	genuine := f.request("system:node:n1", secret, f.pcrs, nil)
	copied := f.request("system:node:n1", secret, f.pcrs, nil)
	copied.Evidence = genuine.Evidence
	junk := map[string]*Request{
		"wrong secret":            f.request("system:node:n1", pcrVal(9), f.pcrs, nil),
		"evidence of another key": copied,
		"changed PCR":             f.request("system:node:n1", secret, map[int][]byte{0: pcrVal(1), 7: pcrVal(8)}, nil),
		"garbage quote": func() *Request {
			r := f.request("system:node:n1", secret, f.pcrs, nil)
			r.Evidence.Quote, r.Evidence.Signature = []byte("junk"), []byte("junk")
			return r
		}(),
	}
	for name, req := range junk {
		if _, err := f.v.VerifyRequest(ctx, "n1", ClientRequest, req); err == nil {
			t.Fatalf("%s: accepted", name)
		}
		if c, _ := f.store.GetChallenge(ctx, "n1"); c == nil {
			t.Fatalf("%s spent the challenge", name)
		}
	}
	if _, err := f.v.VerifyRequest(ctx, "n1", ClientRequest, genuine); err != nil {
		t.Fatalf("the genuine answer after the junk: %v", err)
	}
	if c, _ := f.store.GetChallenge(ctx, "n1"); c != nil {
		t.Fatal("the genuine answer left the challenge outstanding")
	}
}

// TestVerifyRequestRacesForOneChallenge: of two valid answers to one
// challenge (the same evidence twice) only one passes.
func TestVerifyRequestRacesForOneChallenge(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	f.v.Policy.TrustOnFirstUse = true
	// Bound already, so that only the challenge decides.
	_ = f.store.Bind(ctx, Binding{Node: "n1", EKFingerprint: f.ekFP, PCRs: f.pcrs})
	req := f.request("system:node:n1", f.challenge("n1"), f.pcrs, nil)
	results := make(chan error, 2)
	for range 2 {
		go func() { _, err := f.v.VerifyRequest(ctx, "n1", ClientRequest, req); results <- err }()
	}
	var passed int
	for range 2 {
		if err := <-results; err == nil {
			passed++
		} else if r := reason(err); r != "NoChallenge" {
			t.Fatalf("the losing answer: %v", err)
		}
	}
	if passed != 1 {
		t.Fatalf("%d answers to one challenge passed", passed)
	}
}

// TestChallengeAttemptsAreTheNodes: challenges asked in another node's
// name with this node's EK are not counted against this node (nor is an
// EK bound to another node counted at all), so that one node cannot use up
// another's attempts for the hour.
func TestChallengeAttemptsAreTheNodes(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	for i := 1; i <= 3; i++ {
		if _, _, err := f.v.Challenge(ctx, ChallengeRequest{Node: "n2", EKPublic: f.ekArea, AKPublic: f.akArea}); err != nil {
			t.Fatalf("n2's attempt %d: %v", i, err)
		}
	}
	if _, _, err := f.v.Challenge(ctx, ChallengeRequest{Node: "n1", EKPublic: f.ekArea, AKPublic: f.akArea}); err != nil {
		t.Fatalf("n1's first attempt after n2 used n1's EK three times: %v", err)
	}
	f = newFixture(t, false)
	_ = f.store.Bind(ctx, Binding{Node: "n1", EKFingerprint: f.ekFP})
	for range 5 {
		if _, _, err := f.v.Challenge(ctx, ChallengeRequest{Node: "n2", EKPublic: f.ekArea, AKPublic: f.akArea}); reason(err) != "EKBoundToAnotherNode" {
			t.Fatalf("n2 with n1's bound EK: %v", err)
		}
	}
	if _, _, err := f.v.Challenge(ctx, ChallengeRequest{Node: "n1", EKPublic: f.ekArea, AKPublic: f.akArea}); err != nil {
		t.Fatalf("n1 after n2's refused attempts: %v", err)
	}
}
