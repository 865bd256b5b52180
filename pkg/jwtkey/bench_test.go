package jwtkey

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"
)

// benchClaims are claims of the size kube-apiserver signs for a pod-bound
// token (issuer, audience, subject, the kubernetes.io private claims),
// base64url as Sign takes them.
func benchClaims(b *testing.B) string {
	b.Helper()
	now := time.Now().Unix()
	raw, err := json.Marshal(map[string]any{
		"aud": []string{"https://kubernetes.default.svc"},
		"exp": now + 3600, "iat": now, "nbf": now,
		"iss": "https://kubernetes.default.svc",
		"jti": "5b1b0e4a-4c77-4b0e-9d3e-0d6f6f2b7a11",
		"kubernetes.io": map[string]any{
			"namespace":      "default",
			"node":           map[string]string{"name": "node-1", "uid": "0f3c1d4e-8a2b-4c1d-9e7f-1a2b3c4d5e6f"},
			"pod":            map[string]string{"name": "app-7d9f8b6c5d-x2x4z", "uid": "6a7b8c9d-0e1f-4a2b-8c3d-4e5f6a7b8c9d"},
			"serviceaccount": map[string]string{"name": "app", "uid": "1e2f3a4b-5c6d-4e7f-8a9b-0c1d2e3f4a5b"},
			"warnafter":      now + 3000,
		},
		"sub": "system:serviceaccount:default:app",
	})
	if err != nil {
		b.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(raw)
}

// BenchmarkSign is the in-process cost of one token's signature, what
// kube-apiserver pays per TokenRequest with --service-account-signing-key-file
// and what rekey-apiserver's signjwt pays with a key in memory (Etcd key
// store): header, SHA-256, the key's signature, and for ES256 the ASN.1 to
// R||S conversion. The signjwt and host-signer round trips around it are
// measured by test/bench (-satokens) and pkg/externaljwt's
// BenchmarkSignOverSocket.
func BenchmarkSign(b *testing.B) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	keys := []struct {
		name   string
		signer func() (crypto.Signer, error)
	}{
		{"ES256", func() (crypto.Signer, error) { return ec, nil }},
		{"RS256-2048", func() (crypto.Signer, error) { return rsa.GenerateKey(rand.Reader, 2048) }},
		{"RS256-3072", func() (crypto.Signer, error) { return rsa.GenerateKey(rand.Reader, 3072) }},
		{"RS256-4096", func() (crypto.Signer, error) { return rsa.GenerateKey(rand.Reader, 4096) }},
	}
	claims := benchClaims(b)
	for _, k := range keys {
		b.Run(k.name, func(b *testing.B) {
			signer, err := k.signer()
			if err != nil {
				b.Fatal(err)
			}
			kid, err := KeyID(signer.Public())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := Sign(signer, kid, claims); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSignParallel is BenchmarkSign's ES256 with every core signing
// at once: signatures per second of one process, as many TokenRequests
// at once give.
func BenchmarkSignParallel(b *testing.B) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	kid, err := KeyID(&ec.PublicKey)
	if err != nil {
		b.Fatal(err)
	}
	claims := benchClaims(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := Sign(ec, kid, claims); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkDecodeClaims is the claims check every Sign is preceded by (in
// the host signer and again in signjwt).
func BenchmarkDecodeClaims(b *testing.B) {
	claims := benchClaims(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeClaims(claims); err != nil {
			b.Fatal(err)
		}
	}
}
