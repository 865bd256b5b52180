package jwtkey

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
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
// decoding must never panic, and what it accepts is a JSON object that
// every reader reads alike: its top-level members are all distinct (as
// many as a map of them holds), and a case-insensitive, last-wins reader
// (Go's encoding/json into a struct, as go-oidc reads exp) sees each
// registered claim exactly as the case-sensitive map does.
func FuzzDecodeClaims(f *testing.F) {
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"https://kubernetes.default.svc","exp":1700003600,"iat":1700000000}`)))
	f.Add("")
	f.Add("eyJ!!!")
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`null`)))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"exp":1700003600,"EXP":2000000000}`)))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"exp":1700003600,"exp":2000000000}`)))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("{\"\u017fub\":\"x\",\"Iat\":1}")))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"kubernetes.io":{"namespace":"a","NAMESPACE":"b"}}`)))
	f.Fuzz(func(t *testing.T, s string) {
		obj, err := DecodeClaims(s)
		if err != nil {
			return
		}
		if obj == nil {
			t.Fatal("accepted claims without an object")
		}
		payload, _ := base64.RawURLEncoding.DecodeString(s)
		if n := topLevelMembers(t, payload); n != len(obj) {
			t.Fatalf("accepted %d top-level members that a map holds as %d: %q", n, len(obj), payload)
		}
		var folded struct {
			Exp json.RawMessage `json:"exp"`
			Iat json.RawMessage `json:"iat"`
			Nbf json.RawMessage `json:"nbf"`
			Iss json.RawMessage `json:"iss"`
			Aud json.RawMessage `json:"aud"`
			Sub json.RawMessage `json:"sub"`
			Jti json.RawMessage `json:"jti"`
		}
		if err := json.Unmarshal(payload, &folded); err != nil {
			t.Fatalf("accepted claims encoding/json refuses: %v", err)
		}
		for name, got := range map[string]json.RawMessage{"exp": folded.Exp, "iat": folded.Iat, "nbf": folded.Nbf, "iss": folded.Iss, "aud": folded.Aud, "sub": folded.Sub, "jti": folded.Jti} {
			if !bytes.Equal(got, obj[name]) {
				t.Fatalf("a case-insensitive reader reads %q as %s, the claims say %s: %q", name, got, obj[name], payload)
			}
		}
	})
}

// topLevelMembers counts the members of the JSON object payload.
func topLevelMembers(t *testing.T, payload []byte) int {
	dec := json.NewDecoder(bytes.NewReader(payload))
	depth, n, wantName := 0, 0, false
	for {
		tok, err := dec.Token()
		if err != nil {
			return n
		}
		if depth == 1 && wantName {
			if tok == json.Delim('}') {
				return n
			}
			n++
			wantName = false
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			if depth == 1 {
				wantName = true
			}
		case json.Delim('}'), json.Delim(']'):
			depth--
			if depth == 1 {
				wantName = true
			}
		default:
			if depth == 1 {
				wantName = true
			}
		}
	}
}
