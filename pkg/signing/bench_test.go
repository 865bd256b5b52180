package signing

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
	"time"
)

// BenchmarkIssue signs one client certificate per iteration with a CA of
// each supported algorithm.
func BenchmarkIssue(b *testing.B) {
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "bench"}}, leafKey)
	if err != nil {
		b.Fatal(err)
	}
	req, err := x509.ParseCertificateRequest(der)
	if err != nil {
		b.Fatal(err)
	}
	for _, alg := range []Algorithm{ECDSAP256, ECDSAP384, RSA2048, RSA3072, RSA4096, Ed25519} {
		b.Run(string(alg), func(b *testing.B) {
			key, err := GenerateKey(alg)
			if err != nil {
				b.Fatal(err)
			}
			ca, err := NewSelfSignedCA("bench", key, time.Hour, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			in := Issuance{Request: req, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Duration: time.Hour, Now: time.Now()}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := Issue(in, ca, key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
