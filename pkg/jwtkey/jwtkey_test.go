package jwtkey

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
)

// kube-apiserver's keyIDFromPublicKey, as its source computes it: the
// unpadded base64url SHA-256 of the PKIX DER.
func TestKeyIDIsKubeAPIServers(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	sum := sha256.Sum256(der)
	got, err := KeyID(&key.PublicKey)
	if err != nil || got != base64.RawURLEncoding.EncodeToString(sum[:]) || len(got) != 43 {
		t.Fatalf("KeyID = %q, %v", got, err)
	}
}

func TestSignVerifiesES256AndRS256(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	claims := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"system:serviceaccount:a:b","exp":2}`))
	for _, signer := range []crypto.Signer{ec, rk} {
		kid, _ := KeyID(signer.Public())
		hdr, sig, err := Sign(signer, kid, claims)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := base64.RawURLEncoding.DecodeString(hdr)
		var h map[string]string
		if err := json.Unmarshal(raw, &h); err != nil || len(h) != 3 || h["kid"] != kid || h["typ"] != "JWT" {
			t.Fatalf("header %s", raw)
		}
		s, _ := base64.RawURLEncoding.DecodeString(sig)
		digest := sha256.Sum256([]byte(hdr + "." + claims))
		switch k := signer.(type) {
		case *ecdsa.PrivateKey:
			if h["alg"] != "ES256" || len(s) != 64 || !ecdsa.Verify(&k.PublicKey, digest[:], new(big.Int).SetBytes(s[:32]), new(big.Int).SetBytes(s[32:])) {
				t.Fatal("ES256 signature does not verify")
			}
		case *rsa.PrivateKey:
			if h["alg"] != "RS256" || rsa.VerifyPKCS1v15(&k.PublicKey, crypto.SHA256, digest[:], s) != nil {
				t.Fatal("RS256 signature does not verify")
			}
		}
	}
}

func TestAlgorithmForRefusesOtherKeys(t *testing.T) {
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	ed, _, _ := ed25519.GenerateKey(rand.Reader)
	for _, pub := range []crypto.PublicKey{&p384.PublicKey, &small.PublicKey, ed} {
		if alg, err := AlgorithmFor(pub); err == nil {
			t.Errorf("%T: %s accepted", pub, alg)
		}
	}
}

func TestDecodeClaims(t *testing.T) {
	for name, in := range map[string]string{
		"empty":    "",
		"padded":   base64.URLEncoding.EncodeToString([]byte(`{"a":1}`)),
		"not json": base64.RawURLEncoding.EncodeToString([]byte(`{`)),
		"array":    base64.RawURLEncoding.EncodeToString([]byte(`[1]`)),
		"null":     base64.RawURLEncoding.EncodeToString([]byte(`null`)),
		"too big":  strings.Repeat("A", MaxClaimsSize+1),
	} {
		if _, err := DecodeClaims(in); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if obj, err := DecodeClaims(base64.RawURLEncoding.EncodeToString([]byte(`{"exp":5}`))); err != nil || string(obj["exp"]) != "5" {
		t.Fatalf("%v %v", obj, err)
	}
}

// TestDecodeClaimsMemberNames: a verifier reading claims with Go's
// encoding/json (go-oidc and others that federate with the issuer's JWKS)
// folds case and takes the last of duplicate members, so "EXP" after
// "exp" is its expiry. Claims where two members could be read as one, or
// where a member is a case variant of a registered claim, are refused;
// kube-apiserver never sends them.
func TestDecodeClaimsMemberNames(t *testing.T) {
	for _, tc := range []struct{ name, json, want string }{
		{"duplicate exp", `{"exp":5,"exp":6}`, `duplicate member "exp"`},
		{"case-variant EXP beside exp", `{"exp":5,"EXP":315360000}`, `"EXP" and "exp" differ only in case`},
		{"lone case-variant Iat", `{"Iat":5}`, `"Iat" is a case variant of the registered claim "iat"`},
		{"lone case-variant ISS", `{"ISS":"x"}`, `"ISS" is a case variant of the registered claim "iss"`},
		{"long s in sub (folds to s)", "{\"\u017fub\":\"x\"}", `is a case variant of the registered claim "sub"`},
		{"escaped duplicate", `{"exp":5,"\u0065xp":6}`, `duplicate member "exp"`},
		{"nested case duplicate", `{"kubernetes.io":{"namespace":"a","Namespace":"b"}}`, `"Namespace" and "namespace" differ only in case`},
		{"nested in an array", `{"aud":[{"a":1,"a":2}]}`, `duplicate member "a"`},
		{"case-variant aud, nbf, jti", `{"Aud":"x"}`, `registered claim "aud"`},
	} {
		_, err := DecodeClaims(base64.RawURLEncoding.EncodeToString([]byte(tc.json)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	// Different members, the same key in sibling objects, and case variants
	// of names that are not registered claims at the top level are fine.
	for _, ok := range []string{
		`{"aud":["a","a"],"exp":1,"iat":1,"iss":"x","jti":"j","nbf":1,"sub":"s","kubernetes.io":{"pod":{"name":"p","uid":"u"},"svcacct":{"name":"n","uid":"u"}}}`,
		`{"a":{"x":1},"b":{"x":1},"Expiry":1,"exp_":2}`,
	} {
		if _, err := DecodeClaims(base64.RawURLEncoding.EncodeToString([]byte(ok))); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

func TestParsePublicKeyPEM(t *testing.T) {
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	pkix, _ := x509.MarshalPKIXPublicKey(&rk.PublicKey)
	good := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkix}))
	pkcs1 := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&rk.PublicKey)}))
	for _, s := range []string{good, pkcs1} {
		if pub, err := ParsePublicKeyPEM(s); err != nil || !rk.PublicKey.Equal(pub) {
			t.Fatalf("%v", err)
		}
	}
	priv := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)}))
	for name, s := range map[string]string{"private": priv, "two": good + good, "none": "x", "big": strings.Repeat(" ", MaxPublicKeyPEMSize+1)} {
		if _, err := ParsePublicKeyPEM(s); err == nil {
			t.Errorf("%s: accepted", name)
		} else if name == "private" && strings.Contains(err.Error(), "MII") {
			t.Errorf("the error quotes the key: %v", err)
		}
	}
}
