package jwtkey

import (
	"encoding/base64"
	"testing"
)

// FuzzParsePublicKeyPEM: legacyPublicKeys come from whoever may write a
// CertificateAuthority; parsing must never panic, and what it accepts is a
// key KeyID can name.
func FuzzParsePublicKeyPEM(f *testing.F) {
	f.Add("-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n")
	f.Add("-----BEGIN RSA PUBLIC KEY-----\nAAAA\n-----END RSA PUBLIC KEY-----\n")
	f.Add("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		pub, err := ParsePublicKeyPEM(s)
		if err != nil {
			return
		}
		if _, err := KeyID(pub); err != nil {
			t.Fatalf("accepted a key KeyID cannot name: %v", err)
		}
	})
}

// FuzzDecodeClaims: claims come from the socket and from signjwt callers;
// decoding must never panic, and what it accepts is a JSON object.
func FuzzDecodeClaims(f *testing.F) {
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"https://kubernetes.default.svc","exp":1700003600,"iat":1700000000}`)))
	f.Add("")
	f.Add("eyJ!!!")
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`null`)))
	f.Fuzz(func(t *testing.T, s string) {
		obj, err := DecodeClaims(s)
		if err == nil && obj == nil {
			t.Fatal("accepted claims without an object")
		}
	})
}
