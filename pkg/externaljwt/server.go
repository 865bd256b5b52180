// Package externaljwt serves kube-apiserver's external service-account token
// signer API (k8s.io/externaljwt/apis/v1: Sign, FetchKeys, Metadata) over
// gRPC: FetchKeys and Metadata from a KeySource (the verification keys and
// the longest token lifetime), Sign through a Signer (rekey-agent
// jwt-signer's forwards the claims to rekey-apiserver's signjwt, where the
// key is). The server checks both against what kube-apiserver accepts, so
// that a bad answer is refused here with a gRPC code rather than by
// kube-apiserver later.
package externaljwt

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	externaljwtv1 "k8s.io/externaljwt/apis/v1"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/jwtkey"
)

// MinMaxTokenExpiration is the least kube-apiserver accepts from Metadata
// (its validation.MinTokenAgeSec); below it kube-apiserver refuses to start.
const MinMaxTokenExpiration = 600 * time.Second

// maxHeaderSize caps the JWS header a Signer answers before it is decoded;
// alg, kid (at most 1024 bytes) and typ fit well within it.
const maxHeaderSize = 4 << 10

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
	Keys []VerificationKey
	// DataTimestamp is when the key set last changed.
	DataTimestamp time.Time
	// RefreshHint is how soon kube-apiserver should fetch the keys again;
	// it is rounded up to whole seconds and must be positive.
	RefreshHint time.Duration
	// MaxTokenExpiration is what Metadata answers: the longest token
	// lifetime kube-apiserver may ask for; at least MinMaxTokenExpiration,
	// whole seconds.
	MaxTokenExpiration time.Duration
}

// KeySource hands out the current keys. Keys is called on every request,
// so it should answer from memory; an error is answered as Unavailable
// (nothing to serve yet), unless it carries a gRPC status.
type KeySource interface {
	Keys(ctx context.Context) (KeySet, error)
}

// Signer signs claims that DecodeClaims accepted, with the key that signs
// now, and answers the unpadded base64url JWS header and signature and the
// kid that signed. An error carrying a gRPC status (status.Error) is
// answered with that status; any other as Internal. Sign checks that the
// kid is one the KeySource serves for discovery before it answers.
type Signer interface {
	SignJWT(ctx context.Context, claims string) (header, signature, keyID string, err error)
}

// Options configure a Server.
type Options struct {
	// FetchedKeys, when set, is called with the key set of every
	// FetchKeys answer, before it is sent: rekey-agent jwt-signer reports
	// from it which keys its kube-apiserver has.
	FetchedKeys func(ctx context.Context, ks KeySet)
	// AllowedUIDs, when not empty, are the only uids whose processes
	// are served (Serve checks each connection's SO_PEERCRED; any other
	// call is refused PermissionDenied, as is one whose peer cannot be
	// told, such as over TCP). Empty: whoever the socket admits.
	AllowedUIDs []uint32
}

// Server implements externaljwtv1.ExternalJWTSignerServer.
type Server struct {
	externaljwtv1.UnimplementedExternalJWTSignerServer
	source KeySource
	signer Signer
	opts   Options
}

var _ externaljwtv1.ExternalJWTSignerServer = &Server{}

// NewServer returns the service implementation.
func NewServer(source KeySource, signer Signer, opts Options) (*Server, error) {
	if source == nil {
		return nil, errors.New("externaljwt: source: must not be nil")
	}
	if signer == nil {
		return nil, errors.New("externaljwt: signer: must not be nil")
	}
	return &Server{source: source, signer: signer, opts: opts}, nil
}

// keys reads the source; its error is a gRPC status error.
func (s *Server) keys(ctx context.Context) (KeySet, error) {
	ks, err := s.source.Keys(ctx)
	if err == nil {
		return ks, nil
	}
	klog.FromContext(ctx).Error(err, "Reading the service-account token keys failed")
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return KeySet{}, err
	}
	return KeySet{}, status.Errorf(codes.Unavailable, "reading keys: %v", err)
}

// Metadata answers the longest token lifetime the signer supports.
func (s *Server) Metadata(ctx context.Context, _ *externaljwtv1.MetadataRequest) (*externaljwtv1.MetadataResponse, error) {
	ks, err := s.keys(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkMaxTokenExpiration(ks.MaxTokenExpiration); err != nil {
		klog.FromContext(ctx).Error(err, "The key source's metadata cannot be served")
		return nil, status.Errorf(codes.Internal, "maxTokenExpiration: %v", err)
	}
	return &externaljwtv1.MetadataResponse{MaxTokenExpirationSeconds: int64(ks.MaxTokenExpiration / time.Second)}, nil
}

func checkMaxTokenExpiration(d time.Duration) error {
	if d < MinMaxTokenExpiration {
		return fmt.Errorf("%s is less than the %s kube-apiserver requires", d, MinMaxTokenExpiration)
	}
	if d%time.Second != 0 {
		return fmt.Errorf("%s is not a whole number of seconds", d)
	}
	return nil
}

// FetchKeys answers every verification key, in the form kube-apiserver
// checks (keycache.go): at least one key, kids of 1 to 1024 bytes, PKIX
// keys, a valid timestamp and a positive refresh hint.
func (s *Server) FetchKeys(ctx context.Context, _ *externaljwtv1.FetchKeysRequest) (*externaljwtv1.FetchKeysResponse, error) {
	logger := klog.FromContext(ctx)
	ks, err := s.keys(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := FetchKeysResponse(ks)
	if err != nil {
		logger.Error(err, "The key source's keys cannot be served")
		return nil, status.Errorf(codes.Internal, "serving keys: %v", err)
	}
	if s.opts.FetchedKeys != nil {
		s.opts.FetchedKeys(ctx, ks)
	}
	logger.V(4).Info("Served the verification keys", "keys", len(resp.Keys), "dataTimestamp", ks.DataTimestamp)
	return resp, nil
}

// FetchKeysResponse is ks as FetchKeys answers it, or why kube-apiserver
// would refuse it.
func FetchKeysResponse(ks KeySet) (*externaljwtv1.FetchKeysResponse, error) {
	if len(ks.Keys) == 0 {
		return nil, errors.New("keys: none")
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
		Keys:          make([]*externaljwtv1.Key, 0, len(ks.Keys)),
		DataTimestamp: ts,
		// Rounded up: a hint below one second would become 0, which
		// kube-apiserver refuses.
		RefreshHintSeconds: int64((ks.RefreshHint + time.Second - 1) / time.Second),
	}
	seen := map[string]bool{}
	for i, k := range ks.Keys {
		if err := jwtkey.CheckKeyID(k.KeyID); err != nil {
			return nil, fmt.Errorf("keys[%d].keyID: %w", i, err)
		}
		if seen[k.KeyID] {
			return nil, fmt.Errorf("keys[%d].keyID: %q is given twice", i, k.KeyID)
		}
		seen[k.KeyID] = true
		der, err := x509.MarshalPKIXPublicKey(k.PublicKey)
		if err != nil {
			return nil, fmt.Errorf("keys[%d] (kid %q).publicKey: %w", i, k.KeyID, err)
		}
		resp.Keys = append(resp.Keys, &externaljwtv1.Key{KeyId: k.KeyID, Key: der, ExcludeFromOidcDiscovery: k.ExcludeFromOIDCDiscovery})
	}
	return resp, nil
}

// header is the JWS protected header; kube-apiserver refuses any other field.
type header struct {
	Algorithm jwtkey.Algorithm `json:"alg"`
	KeyID     string           `json:"kid"`
	Type      string           `json:"typ"`
}

// Sign checks the base64url claims kube-apiserver sends, has the Signer
// sign them and answers the header and the signature; kube-apiserver
// assembles the token as header.claims.signature. The answer is refused
// unless its header is what kube-apiserver accepts and its kid is served
// by FetchKeys for discovery: kube-apiserver never gets a token its own
// keys cannot verify. Claims are never logged.
func (s *Server) Sign(ctx context.Context, req *externaljwtv1.SignJWTRequest) (*externaljwtv1.SignJWTResponse, error) {
	logger := klog.FromContext(ctx)
	claims := req.GetClaims()
	if _, err := jwtkey.DecodeClaims(claims); err != nil {
		logger.V(2).Info("Refused to sign invalid claims", "err", err)
		return nil, status.Errorf(codes.InvalidArgument, "claims: %v", err)
	}
	hdr64, sig64, kid, err := s.signer.SignJWT(ctx, claims)
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
			logger.V(2).Info("Signing a service-account token failed", "code", st.Code(), "err", st.Message())
			return nil, st.Err()
		}
		logger.Error(err, "Signing a service-account token failed")
		return nil, status.Errorf(codes.Internal, "signing: %v", err)
	}
	ks, err := s.keys(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkSigned(ks, hdr64, sig64, kid); err != nil {
		logger.Error(err, "Refused the signer's answer", "kid", kid)
		return nil, status.Errorf(codes.Unavailable, "signing: %v", err)
	}
	logger.V(4).Info("Signed a service-account token", "kid", kid)
	return &externaljwtv1.SignJWTResponse{Header: hdr64, Signature: sig64}, nil
}

// checkSigned checks a Signer's answer against what kube-apiserver
// accepts and the keys served: a header of exactly alg, kid and typ JWT,
// its kid the one answered and a key served for discovery, alg the key's.
func checkSigned(ks KeySet, hdr64, sig64, kid string) error {
	if len(hdr64) > maxHeaderSize {
		return fmt.Errorf("the header is %d bytes, more than %d", len(hdr64), maxHeaderSize)
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(hdr64)
	if err != nil {
		return fmt.Errorf("the header is not unpadded base64url: %w", err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return fmt.Errorf("the header is not a JSON object: %w", err)
	}
	var hdr header
	if err := json.Unmarshal(raw, &hdr); err != nil || len(fields) != 3 || hdr.Type != "JWT" || hdr.Algorithm == "" {
		return fmt.Errorf("the header %s is not exactly alg, kid and typ JWT", raw)
	}
	if hdr.KeyID != kid {
		return fmt.Errorf("the header's kid %q is not the key that signed, %q", hdr.KeyID, kid)
	}
	if sig64 == "" {
		return errors.New("no signature")
	}
	if _, err := base64.RawURLEncoding.Strict().DecodeString(sig64); err != nil {
		return fmt.Errorf("the signature is not unpadded base64url: %w", err)
	}
	for _, k := range ks.Keys {
		if k.KeyID != kid {
			continue
		}
		if k.ExcludeFromOIDCDiscovery {
			// kube-apiserver refuses a token signed with a key kept out
			// of discovery: it only verifies old tokens.
			return fmt.Errorf("key %q is excluded from OIDC discovery and may only verify", kid)
		}
		alg, err := jwtkey.AlgorithmFor(k.PublicKey)
		if err != nil {
			return fmt.Errorf("key %q: %w", kid, err)
		}
		if alg != hdr.Algorithm {
			return fmt.Errorf("key %q signs %s, the header says %s", kid, alg, hdr.Algorithm)
		}
		return nil
	}
	return fmt.Errorf("key %q is not among the keys served (FetchKeys)", kid)
}
