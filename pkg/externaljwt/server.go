// Package externaljwt serves kube-apiserver's external service-account token
// signer API (k8s.io/externaljwt/apis/v1: Sign, FetchKeys, Metadata) over
// gRPC, with keys from a KeySource. It is a building block for issue #33
// and not yet wired into any binary.
package externaljwt

import (
	"context"
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
	"errors"
	"fmt"
	"math/big"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	externaljwtv1 "k8s.io/externaljwt/apis/v1"
	"k8s.io/klog/v2"
)

// Algorithm is a JWS signing algorithm the server signs with.
type Algorithm string

const (
	// ES256 is ECDSA on P-256 with SHA-256 (the default of #33).
	ES256 Algorithm = "ES256"
	// RS256 is RSASSA-PKCS1-v1_5 with SHA-256, for verifiers that need RSA.
	RS256 Algorithm = "RS256"
)

const (
	// MaxClaimsSize caps the base64url claims of one Sign request, checked
	// before decoding: the request comes from whoever can reach the socket.
	// kube-apiserver's claims are a few hundred bytes.
	MaxClaimsSize = 64 << 10
	// MinMaxTokenExpiration is the least kube-apiserver accepts from
	// Metadata (its validation.MinTokenAgeSec); below it kube-apiserver
	// refuses to start.
	MinMaxTokenExpiration = 600 * time.Second
	// maxKeyIDLength is kube-apiserver's limit on a kid, in FetchKeys and
	// in a signed header alike.
	maxKeyIDLength = 1024
	// minRSABits is the least RSA modulus the server signs with.
	minRSABits = 2048
)

// SigningKey is the one key that signs new tokens.
type SigningKey struct {
	// KeyID is the JWS kid; it must be one of the KeySet's verification keys.
	KeyID string
	// Algorithm is ES256 (Signer holds a P-256 key) or RS256 (an RSA key).
	Algorithm Algorithm
	// Signer signs SHA-256 digests; an HSM's key works as well as one in memory.
	Signer crypto.Signer
}

// VerificationKey is a public key kube-apiserver accepts tokens from.
type VerificationKey struct {
	KeyID string
	// PublicKey is marshalled as PKIX (x509.MarshalPKIXPublicKey).
	PublicKey crypto.PublicKey
	// ExcludeFromOIDCDiscovery keeps the key out of /openid/v1/jwks: it only
	// verifies tokens signed earlier (a migrated key), and never signs.
	ExcludeFromOIDCDiscovery bool
}

// KeySet is what a KeySource holds at one moment.
type KeySet struct {
	Signing      SigningKey
	Verification []VerificationKey
	// DataTimestamp is when the key set last changed.
	DataTimestamp time.Time
	// RefreshHint is how soon kube-apiserver should fetch the keys again;
	// it is rounded up to whole seconds and must be positive.
	RefreshHint time.Duration
}

// KeySource hands out the current keys. Keys is called on every request, so
// it should answer from memory.
type KeySource interface {
	Keys(ctx context.Context) (KeySet, error)
}

// Options configure a Server.
type Options struct {
	// MaxTokenExpiration is what Metadata answers: the longest token
	// lifetime kube-apiserver may ask for. At least MinMaxTokenExpiration.
	MaxTokenExpiration time.Duration
}

// Server implements externaljwtv1.ExternalJWTSignerServer.
type Server struct {
	externaljwtv1.UnimplementedExternalJWTSignerServer
	source             KeySource
	maxTokenExpiration time.Duration
}

var _ externaljwtv1.ExternalJWTSignerServer = &Server{}

// NewServer checks the options and returns the service implementation.
func NewServer(source KeySource, opts Options) (*Server, error) {
	if source == nil {
		return nil, errors.New("externaljwt: source: must not be nil")
	}
	if opts.MaxTokenExpiration < MinMaxTokenExpiration {
		return nil, fmt.Errorf("externaljwt: maxTokenExpiration: %s is less than the %s kube-apiserver requires", opts.MaxTokenExpiration, MinMaxTokenExpiration)
	}
	if opts.MaxTokenExpiration%time.Second != 0 {
		return nil, fmt.Errorf("externaljwt: maxTokenExpiration: %s is not a whole number of seconds", opts.MaxTokenExpiration)
	}
	return &Server{source: source, maxTokenExpiration: opts.MaxTokenExpiration}, nil
}

// Metadata answers the longest token lifetime the signer supports.
func (s *Server) Metadata(ctx context.Context, _ *externaljwtv1.MetadataRequest) (*externaljwtv1.MetadataResponse, error) {
	return &externaljwtv1.MetadataResponse{MaxTokenExpirationSeconds: int64(s.maxTokenExpiration / time.Second)}, nil
}

// FetchKeys answers every verification key, in the form kube-apiserver
// checks (keycache.go): at least one key, kids of 1 to 1024 bytes, PKIX
// keys, a valid timestamp and a positive refresh hint.
func (s *Server) FetchKeys(ctx context.Context, _ *externaljwtv1.FetchKeysRequest) (*externaljwtv1.FetchKeysResponse, error) {
	logger := klog.FromContext(ctx)
	ks, err := s.source.Keys(ctx)
	if err != nil {
		logger.Error(err, "Reading the service-account token keys failed")
		return nil, status.Errorf(codes.Unavailable, "reading keys: %v", err)
	}
	resp, err := fetchKeysResponse(ks)
	if err != nil {
		logger.Error(err, "The key source's keys cannot be served")
		return nil, status.Errorf(codes.Internal, "serving keys: %v", err)
	}
	logger.V(4).Info("Served the verification keys", "keys", len(resp.Keys), "dataTimestamp", ks.DataTimestamp)
	return resp, nil
}

func fetchKeysResponse(ks KeySet) (*externaljwtv1.FetchKeysResponse, error) {
	if len(ks.Verification) == 0 {
		return nil, errors.New("verification: no keys")
	}
	if ks.RefreshHint <= 0 {
		return nil, fmt.Errorf("refreshHint: %s must be positive", ks.RefreshHint)
	}
	if ks.DataTimestamp.IsZero() {
		return nil, errors.New("dataTimestamp: must be set")
	}
	ts := timestamppb.New(ks.DataTimestamp)
	if err := ts.CheckValid(); err != nil {
		return nil, fmt.Errorf("dataTimestamp: %w", err)
	}
	resp := &externaljwtv1.FetchKeysResponse{
		Keys:          make([]*externaljwtv1.Key, 0, len(ks.Verification)),
		DataTimestamp: ts,
		// Rounded up: a hint below one second would become 0, which
		// kube-apiserver refuses.
		RefreshHintSeconds: int64((ks.RefreshHint + time.Second - 1) / time.Second),
	}
	for i, k := range ks.Verification {
		if err := checkKeyID(k.KeyID); err != nil {
			return nil, fmt.Errorf("verification[%d].keyID: %w", i, err)
		}
		der, err := x509.MarshalPKIXPublicKey(k.PublicKey)
		if err != nil {
			return nil, fmt.Errorf("verification[%d] (kid %q).publicKey: %w", i, k.KeyID, err)
		}
		resp.Keys = append(resp.Keys, &externaljwtv1.Key{KeyId: k.KeyID, Key: der, ExcludeFromOidcDiscovery: k.ExcludeFromOIDCDiscovery})
	}
	return resp, nil
}

func checkKeyID(kid string) error {
	if kid == "" {
		return errors.New("must not be empty")
	}
	if len(kid) > maxKeyIDLength {
		return fmt.Errorf("is %d bytes, more than %d", len(kid), maxKeyIDLength)
	}
	return nil
}

// header is the JWS protected header; kube-apiserver refuses any other field.
type header struct {
	Algorithm Algorithm `json:"alg"`
	KeyID     string    `json:"kid"`
	Type      string    `json:"typ"`
}

// Sign signs the base64url claims kube-apiserver sends with the current
// signing key and answers the header and the signature; kube-apiserver
// assembles the token as header.claims.signature.
func (s *Server) Sign(ctx context.Context, req *externaljwtv1.SignJWTRequest) (*externaljwtv1.SignJWTResponse, error) {
	logger := klog.FromContext(ctx)
	if err := checkClaims(req.GetClaims()); err != nil {
		logger.V(2).Info("Refused to sign invalid claims", "err", err)
		return nil, status.Errorf(codes.InvalidArgument, "claims: %v", err)
	}
	ks, err := s.source.Keys(ctx)
	if err != nil {
		logger.Error(err, "Reading the service-account token keys failed")
		return nil, status.Errorf(codes.Unavailable, "reading keys: %v", err)
	}
	resp, err := sign(ks, req.GetClaims())
	if err != nil {
		logger.Error(err, "Signing a service-account token failed", "kid", ks.Signing.KeyID)
		return nil, status.Errorf(codes.Internal, "signing: %v", err)
	}
	logger.V(4).Info("Signed a service-account token", "kid", ks.Signing.KeyID, "alg", ks.Signing.Algorithm)
	return resp, nil
}

// checkClaims checks that claims is base64url (unpadded, as JWS) of a JSON
// object, its size capped before decoding.
func checkClaims(claims string) error {
	if claims == "" {
		return errors.New("must not be empty")
	}
	if len(claims) > MaxClaimsSize {
		return fmt.Errorf("%d bytes is more than the %d allowed", len(claims), MaxClaimsSize)
	}
	payload, err := base64.RawURLEncoding.Strict().DecodeString(claims)
	if err != nil {
		return fmt.Errorf("not unpadded base64url: %w", err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	if obj == nil {
		return errors.New("not a JSON object: null")
	}
	return nil
}

func sign(ks KeySet, claims string) (*externaljwtv1.SignJWTResponse, error) {
	key := ks.Signing
	if err := checkKeyID(key.KeyID); err != nil {
		return nil, fmt.Errorf("signing key: keyID: %w", err)
	}
	if key.Signer == nil {
		return nil, fmt.Errorf("signing key %q: no signer", key.KeyID)
	}
	// The signing key must be published before it signs (a token with an
	// unknown kid fails review until the next fetch), and a key kept out of
	// discovery only verifies old tokens: kube-apiserver refuses a token
	// signed with one.
	published := false
	for _, v := range ks.Verification {
		if v.KeyID != key.KeyID {
			continue
		}
		if v.ExcludeFromOIDCDiscovery {
			return nil, fmt.Errorf("signing key %q is excluded from OIDC discovery and may only verify", key.KeyID)
		}
		published = true
	}
	if !published {
		return nil, fmt.Errorf("signing key %q is not among the verification keys", key.KeyID)
	}
	if err := checkAlgorithm(key); err != nil {
		return nil, fmt.Errorf("signing key %q: %w", key.KeyID, err)
	}
	hdr, err := json.Marshal(header{Algorithm: key.Algorithm, KeyID: key.KeyID, Type: "JWT"})
	if err != nil {
		return nil, fmt.Errorf("encoding the header: %w", err)
	}
	hdr64 := base64.RawURLEncoding.EncodeToString(hdr)
	digest := sha256.Sum256([]byte(hdr64 + "." + claims))
	sig, err := key.Signer.Sign(rand.Reader, digest[:], crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("signing key %q: %w", key.KeyID, err)
	}
	if key.Algorithm == ES256 {
		if sig, err = ecdsaASN1ToJWS(sig, 32); err != nil {
			return nil, fmt.Errorf("signing key %q: %w", key.KeyID, err)
		}
	}
	return &externaljwtv1.SignJWTResponse{Header: hdr64, Signature: base64.RawURLEncoding.EncodeToString(sig)}, nil
}

// checkAlgorithm checks that the signer's key is of the kind its algorithm names.
func checkAlgorithm(key SigningKey) error {
	switch key.Algorithm {
	case ES256:
		pub, ok := key.Signer.Public().(*ecdsa.PublicKey)
		if !ok || pub.Curve != elliptic.P256() {
			return fmt.Errorf("algorithm %s needs a P-256 ECDSA key", key.Algorithm)
		}
	case RS256:
		pub, ok := key.Signer.Public().(*rsa.PublicKey)
		if !ok {
			return fmt.Errorf("algorithm %s needs an RSA key", key.Algorithm)
		}
		if pub.N.BitLen() < minRSABits {
			return fmt.Errorf("algorithm %s needs an RSA key of at least %d bits, not %d", key.Algorithm, minRSABits, pub.N.BitLen())
		}
	default:
		return fmt.Errorf("algorithm %q is not ES256 or RS256", key.Algorithm)
	}
	return nil
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
