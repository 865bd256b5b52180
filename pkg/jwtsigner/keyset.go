package jwtsigner

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/externaljwt"
	"rekey.io/rekey/pkg/jwtkey"
	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/strictpem"
)

// State is what a served key is to the CertificateAuthority.
type State string

// States of a served key (the values of rekey_jwt_signer_keys's state).
const (
	// StateCurrent is status.current: the key that signs.
	StateCurrent State = "current"
	// StateNext is status.next, while Preparing: published before it signs.
	StateNext State = "next"
	// StatePrevious is status.previous: it signed the tokens still in use.
	StatePrevious State = "previous"
	// StateLegacy is a spec.serviceAccountTokens.legacyPublicKeys entry:
	// verify-only, kept out of OIDC discovery, until its expireTime.
	StateLegacy State = "legacy"
)

var states = []State{StateCurrent, StateNext, StatePrevious, StateLegacy}

var phases = []rotationv1alpha1.RotationPhase{rotationv1alpha1.PhaseNone, rotationv1alpha1.PhasePreparing, rotationv1alpha1.PhasePrepared, rotationv1alpha1.PhaseCompleting, rotationv1alpha1.PhaseCompleted}

// maxResourceVersionLength caps the resourceVersion a cache file records
// (only logged).
const maxResourceVersionLength = 64

const (
	// MaxCacheFileSize caps the cache file before it is parsed: three CA
	// keys and eight legacy keys, RSA-4096 at worst, are under 16 KiB.
	MaxCacheFileSize = 256 << 10
	// maxCACertificateSize caps one CA certificate's PEM before parsing.
	maxCACertificateSize = 64 << 10
	// maxKeys caps the keys of one set: current, next, previous and the
	// API's eight legacy keys.
	maxKeys = 3 + 8
)

// Key is one verification key, as the cache file holds it: public only.
type Key struct {
	// KeyID is the kid: jwtkey.KeyID of the public key.
	KeyID string `json:"keyID"`
	State State  `json:"state"`
	// PublicKey is a PEM "PUBLIC KEY" (PKIX).
	PublicKey string `json:"publicKey"`
	// Fingerprint is the CA certificate's ("SHA256:" and hex, as in the
	// CA's status and a TrustConsumer's report); empty for a legacy key.
	Fingerprint string `json:"fingerprint,omitempty"`
	// ExpireTime is when a legacy key stops being served.
	ExpireTime *time.Time `json:"expireTime,omitempty"`

	pub crypto.PublicKey
}

// Set is the keys served and the longest token lifetime: what the cache
// file holds.
type Set struct {
	// CertificateAuthority is the CA the set is of: a cache of another
	// is not served.
	CertificateAuthority      string `json:"certificateAuthority"`
	Keys                      []Key  `json:"keys"`
	MaxTokenExpirationSeconds int64  `json:"maxTokenExpirationSeconds"`
	// DataTimestamp is when the set last changed.
	DataTimestamp time.Time `json:"dataTimestamp"`
	// RotationPhase and ResourceVersion are the CA's status.phase and
	// resourceVersion when the set was made from it: a signer that
	// starts from the cache file says what the CA was then (a key dropped
	// by a Complete since is still in the file).
	RotationPhase   rotationv1alpha1.RotationPhase `json:"rotationPhase,omitempty"`
	ResourceVersion string                         `json:"resourceVersion,omitempty"`
}

// sameKeys says whether a and b serve the same: everything but the
// timestamp.
func sameKeys(a, b *Set) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.CertificateAuthority != b.CertificateAuthority || a.MaxTokenExpirationSeconds != b.MaxTokenExpirationSeconds {
		return false
	}
	return slices.EqualFunc(a.Keys, b.Keys, func(x, y Key) bool {
		return x.KeyID == y.KeyID && x.State == y.State && x.PublicKey == y.PublicKey && x.Fingerprint == y.Fingerprint &&
			(x.ExpireTime == nil) == (y.ExpireTime == nil) && (x.ExpireTime == nil || x.ExpireTime.Equal(*y.ExpireTime))
	})
}

// without is the set less the legacy keys expired at now, and whether any was.
func (s *Set) without(now time.Time) (*Set, bool) {
	out := *s
	out.Keys = nil
	for _, k := range s.Keys {
		if k.ExpireTime != nil && !k.ExpireTime.After(now) {
			continue
		}
		out.Keys = append(out.Keys, k)
	}
	return &out, len(out.Keys) != len(s.Keys)
}

// nextExpiry is the earliest expireTime of a legacy key (zero: none).
func (s *Set) nextExpiry() time.Time {
	var next time.Time
	for _, k := range s.Keys {
		if k.ExpireTime != nil && (next.IsZero() || k.ExpireTime.Before(next)) {
			next = *k.ExpireTime
		}
	}
	return next
}

// count is how many keys of each state the set has.
func (s *Set) count() map[State]int {
	n := map[State]int{}
	for _, k := range s.Keys {
		n[k.State]++
	}
	return n
}

// keySet is the set as externaljwt serves it, less the legacy keys
// expired at now (the expiry loop drops them from the set soon after; a
// key is never served past its expireTime meanwhile).
func (s *Set) keySet(now time.Time, refreshHint time.Duration) externaljwt.KeySet {
	ks := externaljwt.KeySet{
		DataTimestamp:      s.DataTimestamp,
		RefreshHint:        refreshHint,
		MaxTokenExpiration: time.Duration(s.MaxTokenExpirationSeconds) * time.Second,
	}
	for _, k := range s.Keys {
		if k.ExpireTime != nil && !k.ExpireTime.After(now) {
			continue
		}
		ks.Keys = append(ks.Keys, externaljwt.VerificationKey{KeyID: k.KeyID, PublicKey: k.pub, ExcludeFromOIDCDiscovery: k.State == StateLegacy})
	}
	return ks
}

// signs says whether the set serves kid for discovery (a token
// kube-apiserver gets with it verifies).
func (s *Set) signs(kid string) bool {
	for _, k := range s.Keys {
		if k.KeyID == kid {
			return k.State != StateLegacy
		}
	}
	return false
}

// publicKey is the public key the set serves for discovery as kid (nil:
// none; a legacy key never signs).
func (s *Set) publicKey(kid string) crypto.PublicKey {
	for _, k := range s.Keys {
		if k.KeyID == kid && k.State != StateLegacy {
			return k.pub
		}
	}
	return nil
}

// FromCA is the set a ServiceAccountTokens CertificateAuthority says to
// serve at now (without a timestamp): its current, next and previous keys
// (their CA certificates' public keys) and its legacy public keys whose
// expireTime is after now. A legacy key that is also one of the CA's is
// served once, as the CA's.
func FromCA(ca *rotationv1alpha1.CertificateAuthority, now time.Time) (*Set, error) {
	if ca.Spec.Purpose != rotationv1alpha1.PurposeServiceAccountTokens {
		return nil, fmt.Errorf("CertificateAuthority %s signs certificates (spec.purpose %q), not service-account tokens", ca.Name, ca.Spec.Purpose)
	}
	if ca.Status.Current == nil {
		return nil, fmt.Errorf("CertificateAuthority %s has no current key yet (status.current)", ca.Name)
	}
	set := &Set{
		CertificateAuthority:      ca.Name,
		MaxTokenExpirationSeconds: int64(rotationv1alpha1.DefaultMaxTokenExpiration / time.Second),
		RotationPhase:             ca.Status.Phase,
		ResourceVersion:           ca.ResourceVersion,
	}
	sat := ca.Spec.ServiceAccountTokens
	if sat != nil && sat.MaxTokenExpiration != nil {
		d := sat.MaxTokenExpiration.Duration
		if d < externaljwt.MinMaxTokenExpiration || d%time.Second != 0 {
			return nil, fmt.Errorf("CertificateAuthority %s: spec.serviceAccountTokens.maxTokenExpiration %s is not whole seconds of at least %s", ca.Name, d, externaljwt.MinMaxTokenExpiration)
		}
		set.MaxTokenExpirationSeconds = int64(d / time.Second)
	}
	for _, c := range []struct {
		state State
		field string
		cert  *rotationv1alpha1.CACertificate
	}{{StateCurrent, "status.current", ca.Status.Current}, {StateNext, "status.next", ca.Status.Next}, {StatePrevious, "status.previous", ca.Status.Previous}} {
		if c.cert == nil {
			continue
		}
		k, err := caKey(c.state, c.cert)
		if err != nil {
			return nil, fmt.Errorf("CertificateAuthority %s: %s: %w", ca.Name, c.field, err)
		}
		if slices.ContainsFunc(set.Keys, func(o Key) bool { return o.KeyID == k.KeyID }) {
			// The same key twice (status in the middle of a change):
			// served once, in the first state.
			continue
		}
		set.Keys = append(set.Keys, k)
	}
	if sat != nil {
		for i, l := range sat.LegacyPublicKeys {
			if !l.ExpireTime.After(now) {
				continue
			}
			pub, err := jwtkey.ParsePublicKeyPEM(l.PublicKey)
			if err != nil {
				return nil, fmt.Errorf("CertificateAuthority %s: spec.serviceAccountTokens.legacyPublicKeys[%d].publicKey: %w", ca.Name, i, err)
			}
			k, err := newKey(StateLegacy, pub, "")
			if err != nil {
				return nil, fmt.Errorf("CertificateAuthority %s: spec.serviceAccountTokens.legacyPublicKeys[%d].publicKey: %w", ca.Name, i, err)
			}
			if slices.ContainsFunc(set.Keys, func(o Key) bool { return o.KeyID == k.KeyID }) {
				continue
			}
			expire := l.ExpireTime.UTC()
			k.ExpireTime = &expire
			set.Keys = append(set.Keys, k)
		}
	}
	if len(set.Keys) > maxKeys {
		return nil, fmt.Errorf("CertificateAuthority %s: %d keys to serve, more than %d", ca.Name, len(set.Keys), maxKeys)
	}
	return set, nil
}

// caKey is the key of one of a CA's certificates.
func caKey(state State, c *rotationv1alpha1.CACertificate) (Key, error) {
	if len(c.Certificate) > maxCACertificateSize {
		return Key{}, fmt.Errorf("certificate: %d bytes is more than %d", len(c.Certificate), maxCACertificateSize)
	}
	certs, err := strictpem.Certificates([]byte(c.Certificate), 1)
	if err != nil {
		return Key{}, fmt.Errorf("certificate: %w", err)
	}
	if len(certs) != 1 {
		return Key{}, errors.New("certificate: no certificate")
	}
	cert := certs[0]
	fp := signing.Fingerprint(cert)
	if c.Fingerprint != "" && c.Fingerprint != fp {
		return Key{}, fmt.Errorf("fingerprint %q is not the certificate's, %q", c.Fingerprint, fp)
	}
	// A key that cannot sign tokens (the API refuses one) would make
	// kube-apiserver refuse the whole answer.
	if _, err := jwtkey.AlgorithmFor(cert.PublicKey); err != nil {
		return Key{}, fmt.Errorf("the certificate's key is %w", err)
	}
	k, err := newKey(state, cert.PublicKey, fp)
	if err != nil {
		return Key{}, err
	}
	if c.TokenKeyID != "" && c.TokenKeyID != k.KeyID {
		return Key{}, fmt.Errorf("tokenKeyID %q is not the key's kid, %q", c.TokenKeyID, k.KeyID)
	}
	return k, nil
}

func newKey(state State, pub crypto.PublicKey, fingerprint string) (Key, error) {
	kid, err := jwtkey.KeyID(pub)
	if err != nil {
		return Key{}, err
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return Key{}, fmt.Errorf("marshalling the public key: %w", err)
	}
	return Key{
		KeyID:       kid,
		State:       state,
		PublicKey:   string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})),
		Fingerprint: fingerprint,
		pub:         pub,
	}, nil
}

var fingerprintRE = regexp.MustCompile(`^SHA256:[0-9a-f]{64}$`)

// ReadCache reads the cache file of CertificateAuthority ca: nil, nil when
// there is none. Anything else it cannot vouch for (too large, not a
// set, another CA's, a kid that is not its key's) is an error: the caller
// serves nothing from it.
func ReadCache(path, ca string) (*Set, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening the cache file: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, MaxCacheFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading the cache file %s: %w", path, err)
	}
	if len(data) > MaxCacheFileSize {
		return nil, fmt.Errorf("the cache file %s is larger than %d bytes", path, MaxCacheFileSize)
	}
	var set Set
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&set); err != nil {
		return nil, fmt.Errorf("the cache file %s: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("the cache file %s: trailing data", path)
	}
	if err := set.check(ca); err != nil {
		return nil, fmt.Errorf("the cache file %s: %w", path, err)
	}
	return &set, nil
}

// check checks a set read from the cache file and fills its parsed keys.
func (s *Set) check(ca string) error {
	if s.CertificateAuthority != ca {
		return fmt.Errorf("certificateAuthority: %q, not %q", s.CertificateAuthority, ca)
	}
	d := time.Duration(s.MaxTokenExpirationSeconds) * time.Second
	if d < externaljwt.MinMaxTokenExpiration || s.MaxTokenExpirationSeconds > int64(8760*time.Hour/time.Second) {
		return fmt.Errorf("maxTokenExpirationSeconds: %d is out of range", s.MaxTokenExpirationSeconds)
	}
	if s.DataTimestamp.IsZero() {
		return errors.New("dataTimestamp: must be set")
	}
	if !slices.Contains(phases, s.RotationPhase) {
		return fmt.Errorf("rotationPhase: %q is not a rotation phase", s.RotationPhase)
	}
	if len(s.ResourceVersion) > maxResourceVersionLength {
		return fmt.Errorf("resourceVersion: longer than %d bytes", maxResourceVersionLength)
	}
	if len(s.Keys) == 0 || len(s.Keys) > maxKeys {
		return fmt.Errorf("keys: %d, want 1 to %d", len(s.Keys), maxKeys)
	}
	seen := map[string]bool{}
	current := 0
	for i := range s.Keys {
		k := &s.Keys[i]
		if !slices.Contains(states, k.State) {
			return fmt.Errorf("keys[%d].state: %q is not one of %v", i, k.State, states)
		}
		pub, err := jwtkey.ParsePublicKeyPEM(k.PublicKey)
		if err != nil {
			return fmt.Errorf("keys[%d].publicKey: %w", i, err)
		}
		kid, err := jwtkey.KeyID(pub)
		if err != nil {
			return fmt.Errorf("keys[%d].publicKey: %w", i, err)
		}
		if kid != k.KeyID {
			return fmt.Errorf("keys[%d].keyID: %q is not the key's kid, %q", i, k.KeyID, kid)
		}
		if seen[kid] {
			return fmt.Errorf("keys[%d].keyID: %q is given twice", i, kid)
		}
		seen[kid] = true
		if k.State == StateLegacy {
			if k.ExpireTime == nil || k.Fingerprint != "" {
				return fmt.Errorf("keys[%d]: a legacy key has an expireTime and no fingerprint", i)
			}
		} else {
			if _, err := jwtkey.AlgorithmFor(pub); err != nil {
				return fmt.Errorf("keys[%d].publicKey: %w", i, err)
			}
			if !fingerprintRE.MatchString(k.Fingerprint) || k.ExpireTime != nil {
				return fmt.Errorf("keys[%d]: a %s key has a fingerprint (SHA256:hex) and no expireTime", i, k.State)
			}
		}
		if k.State == StateCurrent {
			current++
		}
		k.pub = pub
	}
	if current != 1 {
		return fmt.Errorf("keys: %d current keys, want 1", current)
	}
	return nil
}

// WriteCache writes set to path atomically (a temporary file renamed over
// it), mode 0644: it holds public keys only. A missing directory is made.
func WriteCache(path string, set *Set) error {
	data, err := json.MarshalIndent(set, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the key set: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("making the cache file's directory: %w", err)
	}
	return pki.WriteFileAtomic(path, append(data, '\n'), 0o644)
}
