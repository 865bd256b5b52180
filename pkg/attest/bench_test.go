package attest_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"math/big"
	"testing"
	"time"

	"rekey.io/rekey/pkg/attest"
	"rekey.io/rekey/pkg/attest/attesttest"
)

// BenchmarkAttestNode is the server's work for one node's attestation:
// the challenge (EK certificate chain to the policy root, AK checks,
// MakeCredential, the stored challenge) and the request (parse the
// evidence, the secret, the quote's signature and PCRs, the binding), with
// the in-memory store. Making the node's evidence is not timed.
func BenchmarkAttestNode(b *testing.B) {
	ctx := context.Background()
	node := attesttest.NewNode(b)
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "EK root"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(100, 0, 0)}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	ca, _ := x509.ParseCertificate(caDER)
	_, ekKey, err := attest.ParseEKPublic(node.EKPublic)
	if err != nil {
		b.Fatal(err)
	}
	ekCert, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(100, 0, 0),
		KeyUsage: x509.KeyUsageKeyEncipherment, UnknownExtKeyUsage: []asn1.ObjectIdentifier{{2, 23, 133, 8, 1}}}, ca, ekKey, caKey)
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	pcrs := map[int][]byte{0: attesttest.PCR(1), 7: attesttest.PCR(7)}
	store := attest.NewMemoryStore()
	v := &attest.Verifier{Store: store, Now: func() time.Time { return now }, Policy: attest.Policy{
		Name: "p", Roots: roots, PCRs: pcrs, ChallengeLifetime: 5 * time.Minute, MaxAttemptsPerHour: 10,
	}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, _, err := v.Challenge(ctx, attest.ChallengeRequest{Node: "n1", EKCertificate: ekCert, EKPublic: node.EKPublic, AKPublic: node.AKPublic}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		secret := attesttest.KnownSecret(b, store, "n1")
		der, key := attesttest.CSR(b, "system:node:n1", nil)
		request := node.Request(b, der, key, secret, pcrs)
		b.StartTimer()
		req, err := attest.ParseRequest(request)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := v.VerifyRequest(ctx, "n1", attest.ClientRequest, req); err != nil {
			b.Fatal(err)
		}
		// Out of the attempts window for the next round.
		now = now.Add(2 * time.Hour)
	}
}
