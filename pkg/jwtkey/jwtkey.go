// Package jwtkey is what every part of rekey that touches a
// service-account token key agrees on: the key's JWS name (kid) and
// algorithm, the checks on claims before they are signed, the JWS signature
// itself, and the parsing of a public key given in PEM. It has no gRPC or
// API-server dependencies, so that validation, rekey-apiserver's signjwt
// subresource and the host signer (rekey-agent jwt-signer) share it.
package jwtkey

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Algorithm is a JWS signing algorithm rekey signs with.
type Algorithm string

const (
	// ES256 is ECDSA on P-256 with SHA-256 (the default).
	ES256 Algorithm = "ES256"
	// RS256 is RSASSA-PKCS1-v1_5 with SHA-256, for verifiers that need RSA.
	RS256 Algorithm = "RS256"
)

const (
	// MaxClaimsSize caps the base64url claims of one signature, checked
	// before decoding: kube-apiserver's claims are a few hundred bytes.
	MaxClaimsSize = 64 << 10
	// MaxKeyIDLength is kube-apiserver's limit on a kid.
	MaxKeyIDLength = 1024
	// MinRSABits is the least RSA modulus rekey signs with.
	MinRSABits = 2048
	// MaxPublicKeyPEMSize caps a PEM public key before it is parsed (an
	// RSA-8192 key in PEM is under 2 KiB).
	MaxPublicKeyPEMSize = 16 << 10
)

// The clock tolerances of service-account tokens, one set for every part
// of rekey: signjwt's checks on iat and exp, and how long a rotation keeps
// the previous key after it stopped signing (status.previous.
// tokensExpireTime = Prepared time + maxTokenExpiration + TokenExpiryLeeway).
const (
	// ClockSkew is how far the clock of the kube-apiserver asking for a
	// signature may be from rekey-apiserver's: kube-apiserver sets iat to
	// its own now, so iat must be within ClockSkew of the server's clock.
	// A wider gap is a clock out of step (fix NTP) or claims made up.
	ClockSkew = time.Minute
	// ExpiryLeeway is how far past the server's now + maxTokenExpiration
	// exp may be. kube-apiserver extends projected tokens to exactly
	// maxTokenExpiration (exp = iat + max), so it is ClockSkew: every iat
	// the skew rule accepts comes with an exp that is accepted too.
	ExpiryLeeway = ClockSkew
	// VerifierLeeway is how long past exp kube-apiserver still accepts a
	// token: go-jose's jwt.DefaultLeeway, which its service-account token
	// validator uses.
	VerifierLeeway = time.Minute
	// ReplicaLag is how long after the rotation becomes Prepared a
	// rekey-apiserver replica may still sign with the previous key: until
	// that replica sees Prepared, in its watch cache or in a quorum read
	// of the CA at most ReplicaLag/2 old (signjwt's keyJudge), after which
	// signjwt refuses the previous key.
	ReplicaLag = time.Minute
	// TokenExpiryLeeway is how long after Prepared + maxTokenExpiration a
	// token of the previous key may still be accepted: signed up to
	// ReplicaLag after Prepared, with exp up to ExpiryLeeway past that
	// replica's now + max, verified by a kube-apiserver whose clock is up
	// to ClockSkew behind (one further behind has its own TokenRequests
	// refused), which allows VerifierLeeway past exp.
	TokenExpiryLeeway = ReplicaLag + ExpiryLeeway + ClockSkew + VerifierLeeway
)

// KeyID names a public key as kube-apiserver names its own service-account
// keys (serviceaccount.keyIDFromPublicKey): the unpadded base64url SHA-256
// of the PKIX DER. A token signed under --service-account-signing-key-file
// carries this kid, so a migrated key keeps its name.
func KeyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("marshalling the public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// AlgorithmFor is the algorithm rekey signs with a key of this kind: ES256
// for P-256, RS256 for RSA of at least MinRSABits; any other key is refused.
func AlgorithmFor(pub crypto.PublicKey) (Algorithm, error) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return "", fmt.Errorf("an ECDSA key on %s: only P-256 (ES256) signs tokens", k.Curve.Params().Name)
		}
		return ES256, nil
	case *rsa.PublicKey:
		if k.N.BitLen() < MinRSABits {
			return "", fmt.Errorf("an RSA key of %d bits: at least %d are needed (RS256)", k.N.BitLen(), MinRSABits)
		}
		return RS256, nil
	default:
		return "", fmt.Errorf("a %T key: only ECDSA P-256 (ES256) and RSA (RS256) sign tokens", pub)
	}
}

// CheckKeyID checks a kid as kube-apiserver does: 1 to 1024 bytes.
func CheckKeyID(kid string) error {
	if kid == "" {
		return errors.New("must not be empty")
	}
	if len(kid) > MaxKeyIDLength {
		return fmt.Errorf("is %d bytes, more than %d", len(kid), MaxKeyIDLength)
	}
	return nil
}

// DecodeClaims checks that claims is unpadded base64url of a JSON object,
// its size capped before decoding, with no two members of any object that
// a case-insensitive reader could take for one and no case variant of a
// registered claim (checkMemberNames), and returns the object's members.
func DecodeClaims(claims string) (map[string]json.RawMessage, error) {
	if claims == "" {
		return nil, errors.New("must not be empty")
	}
	if len(claims) > MaxClaimsSize {
		return nil, fmt.Errorf("%d bytes is more than the %d allowed", len(claims), MaxClaimsSize)
	}
	payload, err := base64.RawURLEncoding.Strict().DecodeString(claims)
	if err != nil {
		return nil, fmt.Errorf("not unpadded base64url: %w", err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if obj == nil {
		return nil, errors.New("not a JSON object: null")
	}
	if err := checkMemberNames(payload); err != nil {
		return nil, err
	}
	return obj, nil
}

// RegisteredClaims are the JWT claims (RFC 7519 section 4.1) whose case
// variants DecodeClaims refuses.
var RegisteredClaims = []string{"exp", "iat", "nbf", "iss", "aud", "sub", "jti"}

// checkMemberNames refuses, in every object of payload (valid JSON), two
// members whose names are equal or differ only in case, and at the top
// level a member whose name is a case variant of a registered claim
// without being it. kube-apiserver verifies with go-jose's JSON, which is
// case-sensitive and refuses duplicates, but verifiers that federate with
// the issuer and read claims with Go's encoding/json (go-oidc among them)
// match member names ignoring case and keep the last duplicate: to them
// {"exp":<soon>,"EXP":<in ten years>} expires in ten years, past every
// bound checked on "exp". kube-apiserver never sends such names.
// Names are compared as decoded (escapes resolved), with the same Unicode
// simple case folding as encoding/json (strings.EqualFold).
func checkMemberNames(payload []byte) error {
	type frame struct {
		object bool
		// wantName: the next token of this object is a member name.
		wantName bool
		names    map[string]string // folded name → name as written
	}
	registered := make(map[string]string, len(RegisteredClaims))
	for _, c := range RegisteredClaims {
		registered[foldName(c)] = c
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var stack []*frame
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].wantName = true
		}
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("not a JSON object: %w", err)
		}
		if n := len(stack); n > 0 && stack[n-1].wantName {
			top := stack[n-1]
			if tok == json.Delim('}') {
				stack = stack[:n-1]
				valueDone()
				continue
			}
			name, ok := tok.(string)
			if !ok {
				return fmt.Errorf("not a JSON object: a member name is a %T", tok)
			}
			folded := foldName(name)
			if seen, dup := top.names[folded]; dup {
				if seen == name {
					return fmt.Errorf("duplicate member %s: verifiers disagree on which one counts", quoteName(name))
				}
				return fmt.Errorf("members %s and %s differ only in case: verifiers that ignore case would read them as one", quoteName(name), quoteName(seen))
			}
			if n == 1 {
				if c, ok := registered[folded]; ok && c != name {
					return fmt.Errorf("member %s is a case variant of the registered claim %q: verifiers that ignore case would read it as %q", quoteName(name), c, c)
				}
			}
			top.names[folded] = name
			top.wantName = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, wantName: true, names: map[string]string{}})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'), json.Delim('}'):
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			valueDone()
		default:
			valueDone()
		}
	}
}

// foldName maps a name to the least rune of each rune's Unicode simple
// case-folding orbit, so that foldName(a) == foldName(b) exactly when
// strings.EqualFold(a, b) (and encoding/json's name matching) says they
// are the same name: "ſub" (long s) folds as "sub" does.
func foldName(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < least {
				least = f
			}
		}
		b.WriteRune(least)
	}
	return b.String()
}

// quoteName quotes a member name for an error, cut short: the name comes
// from the caller and may be long.
func quoteName(name string) string {
	const max = 64
	if len(name) > max {
		return strconv.Quote(name[:max]) + "..."
	}
	return strconv.Quote(name)
}

// header is the JWS protected header; kube-apiserver refuses any other field.
type header struct {
	Algorithm Algorithm `json:"alg"`
	KeyID     string    `json:"kid"`
	Type      string    `json:"typ"`
}

// Sign makes the JWS header (alg, kid, typ JWT) and the signature of
// header.claims with signer, both unpadded base64url; claims must already
// be checked (DecodeClaims). An HSM's crypto.Signer works as well as a key
// in memory.
func Sign(signer crypto.Signer, kid, claims string) (hdr64, sig64 string, err error) {
	if err := CheckKeyID(kid); err != nil {
		return "", "", fmt.Errorf("keyID: %w", err)
	}
	if signer == nil {
		return "", "", fmt.Errorf("key %q: no signer", kid)
	}
	alg, err := AlgorithmFor(signer.Public())
	if err != nil {
		return "", "", fmt.Errorf("key %q is %w", kid, err)
	}
	hdr, err := json.Marshal(header{Algorithm: alg, KeyID: kid, Type: "JWT"})
	if err != nil {
		return "", "", fmt.Errorf("encoding the header: %w", err)
	}
	hdr64 = base64.RawURLEncoding.EncodeToString(hdr)
	digest := sha256.Sum256([]byte(hdr64 + "." + claims))
	sig, err := signer.Sign(rand.Reader, digest[:], crypto.SHA256)
	if err != nil {
		return "", "", fmt.Errorf("key %q: %w", kid, err)
	}
	if alg == ES256 {
		if sig, err = ecdsaASN1ToJWS(sig, 32); err != nil {
			return "", "", fmt.Errorf("key %q: %w", kid, err)
		}
	}
	return hdr64, base64.RawURLEncoding.EncodeToString(sig), nil
}

// ecdsaASN1ToJWS turns crypto.Signer's ASN.1 ECDSA signature into JWS's
// fixed-size R||S (RFC 7518 section 3.4).
func ecdsaASN1ToJWS(der []byte, size int) ([]byte, error) {
	var sig struct{ R, S *big.Int }
	rest, err := asn1.Unmarshal(der, &sig)
	if err != nil {
		return nil, fmt.Errorf("parsing the ECDSA signature: %w", err)
	}
	if len(rest) != 0 {
		return nil, errors.New("parsing the ECDSA signature: trailing data")
	}
	if sig.R.Sign() <= 0 || sig.S.Sign() <= 0 || sig.R.BitLen() > size*8 || sig.S.BitLen() > size*8 {
		return nil, errors.New("the ECDSA signature is out of range")
	}
	out := make([]byte, 2*size)
	sig.R.FillBytes(out[:size])
	sig.S.FillBytes(out[size:])
	return out, nil
}

// ParsePublicKeyPEM reads exactly one PEM "PUBLIC KEY" (PKIX) or "RSA
// PUBLIC KEY" (PKCS#1) block, as kube-apiserver's --service-account-key-file
// holds, and accepts the keys kube-apiserver verifies tokens with: RSA of
// at least MinRSABits and ECDSA on P-256, P-384 or P-521.
func ParsePublicKeyPEM(s string) (crypto.PublicKey, error) {
	if len(s) > MaxPublicKeyPEMSize {
		return nil, fmt.Errorf("%d bytes is more than the %d allowed", len(s), MaxPublicKeyPEMSize)
	}
	block, rest := pem.Decode([]byte(s))
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if strings.TrimSpace(string(rest)) != "" {
		return nil, errors.New("more than one PEM block or trailing data: give one key per entry")
	}
	var pub crypto.PublicKey
	var err error
	switch block.Type {
	case "PUBLIC KEY":
		pub, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
	default:
		return nil, fmt.Errorf("a PEM block of type %q: want PUBLIC KEY or RSA PUBLIC KEY (never a private key)", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parsing the %s: %w", block.Type, err)
	}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < MinRSABits {
			return nil, fmt.Errorf("an RSA key of %d bits: at least %d are needed", k.N.BitLen(), MinRSABits)
		}
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
		default:
			return nil, fmt.Errorf("an ECDSA key on an unsupported curve")
		}
	default:
		return nil, fmt.Errorf("a %T key: want RSA or ECDSA", pub)
	}
	return pub, nil
}
