package attest

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/go-tpm/tpm2"

	"rekey.io/rekey/pkg/apis/message"
)

// Policy is an AttestationPolicy as the verifier uses it.
type Policy struct {
	Name string
	// Roots (and Intermediates) verify EK certificates; AllowedEKs are hex
	// fingerprints (Fingerprint) of EK public keys accepted without one.
	Roots, Intermediates *x509.CertPool
	AllowedEKs           map[string]bool
	// PCRs is the exact selection; with fixed values unless
	// TrustOnFirstUse, in which case a node's first attested values are
	// recorded and required from then on.
	PCRs            map[int][]byte
	TrustOnFirstUse bool
	// ChallengeLifetime bounds the time between a challenge and the CSR
	// that answers it; MaxAttemptsPerHour the challenges per EK per hour.
	ChallengeLifetime  time.Duration
	MaxAttemptsPerHour int
}

// StoredChallenge is what the server keeps of an outstanding challenge,
// never readable through the API: the secret only hashed.
type StoredChallenge struct {
	// Policy is the name of the policy the challenge was made under.
	Policy        string
	SecretHash    []byte
	AKPublic      []byte
	EKFingerprint string
	Expires       time.Time
	// Revision identifies this challenge in the store (set by
	// GetChallenge), so that TakeChallenge spends this one and not one
	// that replaced it meanwhile.
	Revision int64 `json:"-"`
}

// Binding is an EK bound to its node on its first successful attestation,
// with the PCR values recorded then.
type Binding struct {
	Node, EKFingerprint string
	PCRs                map[int][]byte
}

// Store keeps bindings, challenges and attempts. Implementations must make
// Bind and TakeChallenge atomic: two requests racing for one challenge or
// one binding must not both win. A challenge is read (GetChallenge) and
// checked before it is taken, so that evidence that does not answer it
// never spends it.
type Store interface {
	BindingForEK(ctx context.Context, ekFingerprint string) (*Binding, error)
	BindingForNode(ctx context.Context, node string) (*Binding, error)
	// Bind records b unless the EK or the node is bound already
	// (ErrAlreadyBound).
	Bind(ctx context.Context, b Binding) error
	PutChallenge(ctx context.Context, node string, c StoredChallenge) error
	// GetChallenge returns a node's outstanding challenge (nil if none)
	// without spending it.
	GetChallenge(ctx context.Context, node string) (*StoredChallenge, error)
	// TakeChallenge deletes the node's challenge c (as GetChallenge
	// returned it) if it is still outstanding, and says whether this call
	// did: a challenge is answered at most once, and a challenge that
	// replaced c is left alone.
	TakeChallenge(ctx context.Context, node string, c *StoredChallenge) (bool, error)
	// Attempt counts one challenge for the EK in the node's name and
	// returns how many there were for that EK and node in the hour up to
	// now, this one included.
	Attempt(ctx context.Context, ekFingerprint, node string, now time.Time) (int, error)
}

// ErrAlreadyBound is what Store.Bind returns for an EK or node bound before.
var ErrAlreadyBound = errors.New("already bound")

// Refusal is an attestation that failed for a reason the node (or an
// attacker) caused; Reason is a CamelCase word for conditions and events.
type Refusal struct {
	Reason  string
	Message string
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Message }

func refuse(reason, format string, args ...any) error {
	return &Refusal{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Verifier runs both server-side steps of attestation under one policy.
type Verifier struct {
	Policy Policy
	Store  Store
	Now    func() time.Time
}

// ChallengeRequest is what a node posts in its NodeAttestation.
type ChallengeRequest struct {
	Node string
	// EKCertificate (DER) or, for an allow-listed EK, none; EKPublic and
	// AKPublic are the TPMT_PUBLIC areas.
	EKCertificate, EKPublic, AKPublic []byte
}

// Challenge checks the node's EK and AK and returns a credential-activation
// challenge (its secret kept hashed in the store) and the EK's fingerprint.
func (v *Verifier) Challenge(ctx context.Context, r ChallengeRequest) (*Challenge, string, error) {
	now := v.Now()
	ekPub, ekKey, err := ParseEKPublic(r.EKPublic)
	if err != nil {
		return nil, "", refuse("InvalidEK", "%v", err)
	}
	fp, err := Fingerprint(ekKey)
	if err != nil {
		return nil, "", err
	}
	// An EK bound to another node is refused before it is counted, and
	// attempts are counted per EK and node: asking in one node's name with
	// another node's EK (public, in its NodeAttestation) must not use up
	// that node's attempts.
	if err := v.checkBinding(ctx, r.Node, fp); err != nil {
		return nil, fp, err
	}
	n, err := v.Store.Attempt(ctx, fp, r.Node, now)
	if err != nil {
		return nil, "", err
	}
	if v.Policy.MaxAttemptsPerHour > 0 && n > v.Policy.MaxAttemptsPerHour {
		return nil, fp, refuse("TooManyAttempts", "EK %s asked for %d challenges for node %s in the last hour (at most %d)", fp, n, r.Node, v.Policy.MaxAttemptsPerHour)
	}
	if err := v.checkEK(r.EKCertificate, fp, now); err != nil {
		return nil, fp, err
	}
	ak, err := ParseAK(r.AKPublic)
	if err != nil {
		return nil, fp, refuse("InvalidAK", "%v", err)
	}
	c, err := MakeChallenge(ekPub, ak.Name)
	if err != nil {
		return nil, fp, err
	}
	if err := v.Store.PutChallenge(ctx, r.Node, StoredChallenge{
		Policy: v.Policy.Name, SecretHash: SecretHash(c.Secret), AKPublic: r.AKPublic, EKFingerprint: fp, Expires: now.Add(v.Policy.ChallengeLifetime),
	}); err != nil {
		return nil, fp, err
	}
	clear(c.Secret)
	c.Secret = nil
	return c, fp, nil
}

// checkEK accepts an EK whose certificate chains to the policy's roots and
// names this EK, or whose fingerprint the policy lists.
func (v *Verifier) checkEK(certDER []byte, fp string, now time.Time) error {
	if v.Policy.AllowedEKs[fp] {
		return nil
	}
	if len(certDER) == 0 || v.Policy.Roots == nil {
		return refuse("EKNotTrusted", "EK %s is not in the policy's allow-list and no certificate from a trusted root was given", fp)
	}
	cert, err := ParseEKCertificate(certDER)
	if err != nil {
		return refuse("InvalidEK", "%v", err)
	}
	certFP, err := Fingerprint(cert.PublicKey)
	if err != nil || certFP != fp {
		return refuse("EKMismatch", "the EK certificate names another key than the EK public area")
	}
	if err := VerifyEKCertificate(cert, v.Policy.Roots, v.Policy.Intermediates, now); err != nil {
		return refuse("EKNotTrusted", "%v", err)
	}
	return nil
}

// checkBinding refuses an EK bound to another node and a node bound to
// another EK.
func (v *Verifier) checkBinding(ctx context.Context, node, fp string) error {
	if b, err := v.Store.BindingForEK(ctx, fp); err != nil {
		return err
	} else if b != nil && b.Node != node {
		return refuse("EKBoundToAnotherNode", "EK %s is bound to node %s, not %s", fp, b.Node, node)
	}
	if b, err := v.Store.BindingForNode(ctx, node); err != nil {
		return err
	} else if b != nil && b.EKFingerprint != fp {
		return refuse("NodeBoundToAnotherEK", "node %s is bound to EK %s, not %s", node, b.EKFingerprint, fp)
	}
	return nil
}

// Attested is what a successful attestation checked, for the request's
// Attested condition.
type Attested struct {
	Node, EKFingerprint, Policy string
	PCRs                        []int
	FirstUse                    bool
}

// RequestKind says which node certificate a request is for, and so which
// names its subject may carry.
type RequestKind int

const (
	// ClientRequest: CN system:node:<node>, O system:nodes, no other names.
	ClientRequest RequestKind = iota
	// ServingRequest: the same subject, with DNS names and IP addresses
	// (which the signer's policy then restricts).
	ServingRequest
)

// VerifyRequest checks a node's CSR and its evidence against the node's
// outstanding challenge and binds the EK to the node on first success.
// Everything is checked before the challenge is taken: evidence that does
// not answer it (junk sent in the node's name by anyone) leaves it
// outstanding for the node's own answer. Only evidence that passes spends
// it, once.
func (v *Verifier) VerifyRequest(ctx context.Context, node string, kind RequestKind, req *Request) (*Attested, error) {
	now := v.Now()
	if err := checkSubject(node, kind, req.CSR); err != nil {
		return nil, err
	}
	if req.Evidence == nil {
		return nil, refuse("NoEvidence", "the request carries no TPM evidence")
	}
	c, err := v.Store.GetChallenge(ctx, node)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, refuse("NoChallenge", "node %s has no outstanding challenge (used already, or never made)", node)
	}
	if c.Policy != v.Policy.Name {
		return nil, refuse("PolicyChanged", "the challenge was made under policy %q, not %q", c.Policy, v.Policy.Name)
	}
	if !now.Before(c.Expires) {
		return nil, refuse("ChallengeExpired", "the challenge expired at %s", c.Expires.UTC().Format(time.RFC3339))
	}
	if !SecretMatches(req.Evidence.Secret, c.SecretHash) {
		return nil, refuse("WrongSecret", "the evidence does not hold the challenge's secret")
	}
	// The binding may have changed since the challenge.
	if err := v.checkBinding(ctx, node, c.EKFingerprint); err != nil {
		return nil, err
	}
	ak, err := ParseAK(c.AKPublic)
	if err != nil {
		return nil, err
	}
	reported, err := req.Evidence.PCRValues()
	if err != nil {
		return nil, refuse("InvalidEvidence", "%v", err)
	}
	expected, firstUse, err := v.expectedPCRs(ctx, node, reported)
	if err != nil {
		return nil, err
	}
	spki, err := x509.MarshalPKIXPublicKey(req.CSR.PublicKey)
	if err != nil {
		return nil, refuse("InvalidRequest", "the request's public key: %v", err)
	}
	if err := VerifyQuote(ak, req.Evidence.Quote, req.Evidence.Signature, QuoteExpectations{
		QualifyingData: QualifyingData(req.Evidence.Secret, spki), Bank: tpm2.TPMAlgSHA256, PCRs: expected,
	}); err != nil {
		return nil, refuse("QuoteRefused", "%v", err)
	}
	// The evidence answers the challenge: spend it, unless another answer
	// (the same evidence sent twice) or a fresh challenge got there first.
	took, err := v.Store.TakeChallenge(ctx, node, c)
	if err != nil {
		return nil, err
	}
	if !took {
		return nil, refuse("NoChallenge", "node %s's challenge was answered by another request, or replaced, meanwhile", node)
	}
	if firstUse {
		if err := v.Store.Bind(ctx, Binding{Node: node, EKFingerprint: c.EKFingerprint, PCRs: expected}); err != nil {
			if errors.Is(err, ErrAlreadyBound) {
				return nil, refuse("BindingRace", "node %s or EK %s was bound by another request meanwhile", node, c.EKFingerprint)
			}
			return nil, err
		}
	}
	return &Attested{Node: node, EKFingerprint: c.EKFingerprint, Policy: v.Policy.Name, PCRs: slices.Sorted(maps.Keys(expected)), FirstUse: firstUse}, nil
}

// expectedPCRs are the values the quote must show: the policy's fixed
// values, or the node's recorded ones, or (trust on first use, first
// time) the reported ones, which the quote's digest must then match.
func (v *Verifier) expectedPCRs(ctx context.Context, node string, reported map[int][]byte) (map[int][]byte, bool, error) {
	b, err := v.Store.BindingForNode(ctx, node)
	if err != nil {
		return nil, false, err
	}
	if !v.Policy.TrustOnFirstUse {
		if err := samePCRs(reported, v.Policy.PCRs, "the policy requires"); err != nil {
			return nil, false, err
		}
		return v.Policy.PCRs, b == nil, nil
	}
	if b != nil {
		if err := samePCRs(reported, b.PCRs, "recorded at the node's first attestation as"); err != nil {
			return nil, false, err
		}
		return b.PCRs, false, nil
	}
	first := map[int][]byte{}
	for i := range v.Policy.PCRs {
		val, ok := reported[i]
		if !ok {
			return nil, false, refuse("InvalidEvidence", "the evidence lacks PCR %d of the policy's selection", i)
		}
		first[i] = val
	}
	return first, true, nil
}

// samePCRs refuses a reported PCR value other than the expected one, with
// a message naming where the expectation comes from (a reported value that
// is missing is left to the quote's digest).
func samePCRs(reported, expected map[int][]byte, source string) error {
	for i, want := range expected {
		if got, ok := reported[i]; ok && !bytes.Equal(got, want) {
			return refuse("PCRMismatch", "PCR %d is %x, %s %x", i, got, source, want)
		}
	}
	return nil
}

// checkSubject: a node certificate names the node and its group; a client
// certificate nothing else, a serving one DNS names and IP addresses only.
func checkSubject(node string, kind RequestKind, csr *x509.CertificateRequest) error {
	if csr.Subject.CommonName != "system:node:"+node {
		return refuse("WrongSubject", "common name %s is not system:node:%s", message.Quote(csr.Subject.CommonName), node)
	}
	if !slices.Equal(csr.Subject.Organization, []string{"system:nodes"}) {
		// The subject is the requester's text: quoted short, whatever its length.
		return refuse("WrongSubject", "organization %s is not [system:nodes]", message.Quote(fmt.Sprint(csr.Subject.Organization)))
	}
	if kind == ServingRequest {
		if len(csr.EmailAddresses)+len(csr.URIs) > 0 || len(csr.DNSNames)+len(csr.IPAddresses) == 0 {
			return refuse("WrongSubject", "a node serving certificate names DNS names or IP addresses, and nothing else")
		}
		return nil
	}
	if len(csr.DNSNames)+len(csr.IPAddresses)+len(csr.EmailAddresses)+len(csr.URIs) > 0 {
		return refuse("WrongSubject", "a node client certificate has no subject alternative names")
	}
	return nil
}
