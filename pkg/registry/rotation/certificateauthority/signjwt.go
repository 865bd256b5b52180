package certificateauthority

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/apis/rotation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/jwtkey"
	"rekey.io/rekey/pkg/signing"
)

// Signature results, as the metrics label them.
const (
	signResultSigned      = "signed"
	signResultRefused     = "refused"
	signResultUnavailable = "unavailable"
	signResultError       = "error"
)

// CAKeys hands out a CA's current key and certificate: the server's one
// authority.Authorities, so that signjwt signs with the key the binding
// names, never one read from status. Forget drops a CA's cached key, so
// that the next Get reads the binding.
type CAKeys interface {
	Get(ctx context.Context, name string) (*authority.Authority, error)
	Forget(name string)
}

var _ CAKeys = &authority.Authorities{}

// SignJWTREST serves POST of a JWTSignRequest to
// certificateauthorities/NAME/signjwt: the claims are checked against the
// CA's spec.serviceAccountTokens and signed with its current key, and the
// JWS header, signature and kid are answered. Nothing is stored. Whoever
// may create this subresource can mint any service-account token the
// issuer's verifiers accept (ClusterRole rekey:jwt-signer).
type SignJWTREST struct {
	cas    rest.Getter
	keys   CAKeys
	clock  clock.PassiveClock
	quorum *quorumReads
}

var (
	_ rest.NamedCreater             = &SignJWTREST{}
	_ rest.GroupVersionKindProvider = &SignJWTREST{}
)

// NewSignJWTREST returns the subresource: cas reads CertificateAuthorities
// from storage (the main resource's store), keys is the server's one
// authority.Authorities.
func NewSignJWTREST(cas rest.Getter, keys CAKeys, clk clock.PassiveClock) *SignJWTREST {
	registerSignJWTMetrics()
	return &SignJWTREST{cas: cas, keys: keys, clock: clk, quorum: newQuorumReads(cas, clk)}
}

// New returns the request kind.
func (r *SignJWTREST) New() runtime.Object { return &rotation.JWTSignRequest{} }

// Destroy does nothing: the main resource owns the store.
func (r *SignJWTREST) Destroy() {}

// GroupVersionKind says the subresource takes JWTSignRequests.
func (r *SignJWTREST) GroupVersionKind(containingGV schema.GroupVersion) schema.GroupVersionKind {
	return containingGV.WithKind("JWTSignRequest")
}

// Create checks the claims against the CA and signs them with its current
// key.
func (r *SignJWTREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	req, ok := obj.(*rotation.JWTSignRequest)
	if !ok {
		return nil, apierrors.NewBadRequest("the signjwt subresource takes a JWTSignRequest")
	}
	if options != nil && len(options.DryRun) > 0 {
		// A dry run would have to sign to show its answer, and a signature
		// is the token: there is nothing to try without doing it.
		return nil, apierrors.NewBadRequest("signjwt does not support dryRun: a dry-run signature would be a real token")
	}
	if createValidation != nil {
		if err := createValidation(ctx, req.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	logger := klog.FromContext(ctx).WithValues("certificateAuthority", name)
	// From the watch cache, not a quorum read of etcd per token: what is
	// read here (purpose, maxTokenExpiration, issuer) is immutable, and the
	// key that signs comes from the binding, not from this object; status
	// only vetoes a key the cache still holds after a promotion, and
	// keyJudge bounds how stale the status it is judged by may be.
	stored, err := r.cas.Get(ctx, name, &metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	ca, ok := stored.(*rotation.CertificateAuthority)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("storage returned a %T, not a CertificateAuthority", stored))
	}
	if err := signsTokens(ca); err != nil {
		signaturesTotal.WithLabelValues(name, "", signResultRefused).Inc()
		return nil, apierrors.NewBadRequest(err.Error())
	}
	checked, err := CheckClaims(req.Claims, ca.Spec.ServiceAccountTokens, r.clock.Now())
	if err != nil {
		signaturesTotal.WithLabelValues(name, "", signResultRefused).Inc()
		logger.V(2).Info("Refused to sign service-account token claims", "reason", err.Error())
		return nil, apierrors.NewInvalid(rotation.Kind("JWTSignRequest"), name,
			field.ErrorList{field.Invalid(field.NewPath("claims"), field.OmitValueType{}, err.Error())})
	}
	if err := ready(ca); err != nil {
		signaturesTotal.WithLabelValues(name, "", signResultUnavailable).Inc()
		return nil, apierrors.NewServiceUnavailable(err.Error())
	}
	// The quorum view is taken after the watch-cache read returned, so
	// that a quorum read begun later is known to be at least as fresh.
	judge := &keyJudge{quorum: r.quorum, name: name, watch: ca, view: r.quorum.last(name), now: r.clock.Now()}
	judge.watchMark = judge.view.started
	auth, err := r.keys.Get(ctx, name)
	if err == nil {
		lets, jerr := judge.lets(ctx, auth)
		if jerr == nil && !lets {
			// The cache answered a key the CA's status does not let sign:
			// it was filled before the promotion, and this replica's
			// informer (which says when to read the binding again) has not
			// seen it yet. The binding is the truth: read it once more.
			r.keys.Forget(name)
			if auth, err = r.keys.Get(ctx, name); err == nil {
				lets, jerr = judge.lets(ctx, auth)
			}
		}
		if jerr != nil {
			signaturesTotal.WithLabelValues(name, "", signResultUnavailable).Inc()
			if apierrors.IsNotFound(jerr) {
				return nil, jerr
			}
			logger.Error(jerr, "Not signing a service-account token: the CertificateAuthority could not be read from etcd to confirm the key")
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("CertificateAuthority %q: this replica could not confirm its current key (a quorum read failed); retry", name))
		}
		if err == nil && !lets {
			signaturesTotal.WithLabelValues(name, "", signResultUnavailable).Inc()
			logger.Info("Not signing a service-account token with a key the CertificateAuthority does not let sign; its status and this replica's key cache disagree",
				"fingerprint", signing.Fingerprint(auth.Cert), "uid", auth.UID)
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("CertificateAuthority %q: this replica's key cache is behind; retry", name))
		}
	}
	if err != nil {
		signaturesTotal.WithLabelValues(name, "", signResultUnavailable).Inc()
		logger.Error(err, "No key to sign service-account tokens with")
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("CertificateAuthority %q has no usable key: %v", name, err))
	}
	kid, err := keyID(auth.Cert)
	if err != nil {
		signaturesTotal.WithLabelValues(name, "", signResultError).Inc()
		return nil, apierrors.NewInternalError(fmt.Errorf("CertificateAuthority %q: %w", name, err))
	}
	start := time.Now()
	hdr, sig, err := jwtkey.Sign(auth.Signer, kid, req.Claims)
	signDuration.WithLabelValues(name).Observe(time.Since(start).Seconds())
	if err != nil {
		signaturesTotal.WithLabelValues(name, kid, signResultError).Inc()
		logger.Error(err, "Signing a service-account token failed", "kid", kid)
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("CertificateAuthority %q could not sign: %v", name, err))
	}
	signaturesTotal.WithLabelValues(name, kid, signResultSigned).Inc()
	logger.V(4).Info("Signed service-account token", "kid", kid, "sub", checked.Subject)
	// The claims are not echoed: the caller has them, and the answer
	// together with them is a bearer token.
	return &rotation.JWTSignRequest{ObjectMeta: metav1.ObjectMeta{Name: name}, Header: hdr, Signature: sig, KeyID: kid}, nil
}

// keyJudge decides, for one signjwt request, whether a key may sign,
// judged by the CertificateAuthority's status as two reads show it: the
// watch cache's (read per token, free) and this replica's last quorum read
// (from etcd, made at most every quorumReadEvery per CA, shared by the
// requests waiting for it).
//
// Why this bounds the previous key's tokens (status.previous.
// tokensExpireTime = Prepared + maxTokenExpiration + jwtkey.
// TokenExpiryLeeway): the controller promotes the new key in the binding
// first and then writes status Prepared (previous = the old key) in one
// update whose lastInitiationFinishedTime is taken before the promotion.
// The old key signs only while every view it is judged by predates that
// update. The watch cache alone may lag without bound (a stalled watch
// with etcd still reachable), so a key signs only if a quorum read begun
// less than quorumReadEvery ago lets it too: once Prepared is committed,
// the first request after the last read's start + quorumReadEvery reads
// again and sees it. The old key therefore signs for at most
// quorumReadEvery + one quorum read (quorumReadTimeout) after the update
// is committed, within jwtkey.ReplicaLag, whatever the watch cache shows;
// normally the watch cache sees Prepared well within a second. A failed
// quorum read refuses (503): nothing signs on a view older than the
// bound. When the two views disagree, neither is known to be the fresher
// (resourceVersions are not ordered for clients), so a quorum read begun
// after the watch-cache read decides.
type keyJudge struct {
	quorum *quorumReads
	name   string
	watch  *rotation.CertificateAuthority
	view   quorumView
	// watchMark is the count of quorum reads started when the watch-cache
	// read had returned: a read numbered above it is at least as fresh.
	watchMark uint64
	now       time.Time
}

// lets says whether auth may sign; an error when a quorum read it needed
// failed.
func (j *keyJudge) lets(ctx context.Context, auth *authority.Authority) (bool, error) {
	w := statusLetsSign(j.watch, auth)
	if j.view.ca == nil || j.now.Sub(j.view.readAt) >= quorumReadEvery {
		// Too old to bound anything: read again, or share the read in
		// progress.
		if err := j.read(ctx, j.view.gen); err != nil {
			return false, err
		}
	}
	q := statusLetsSign(j.view.ca, auth)
	if q == w || j.view.gen > j.watchMark {
		return q, nil
	}
	if err := j.read(ctx, j.watchMark); err != nil {
		return false, err
	}
	return statusLetsSign(j.view.ca, auth), nil
}

func (j *keyJudge) read(ctx context.Context, after uint64) error {
	v, err := j.quorum.fresh(ctx, j.name, after)
	if err != nil {
		return err
	}
	j.view = v
	return nil
}

// statusLetsSign says whether auth, the key the Authorities cache answered,
// may sign for ca as one read shows it: the same object (UID) and the key
// status.current or status.next names, never the one status.previous
// names (keyJudge says how stale ca may be).
// status.next is allowed for the lag the other way: the binding
// promoted it (Authorities never answers a binding's next key) before the
// reads saw Prepared; it is trusted, and jwt-signer serves it.
// Any other key (a status several rotations behind, a CA deleted and
// created again) is refused: jwt-signer serves only keys status names.
func statusLetsSign(ca *rotation.CertificateAuthority, auth *authority.Authority) bool {
	if auth == nil || auth.Cert == nil || auth.UID != string(ca.UID) {
		return false
	}
	fp := signing.Fingerprint(auth.Cert)
	if prev := ca.Status.Previous; prev != nil && prev.Fingerprint == fp {
		return false
	}
	if cur := ca.Status.Current; cur != nil && cur.Fingerprint == fp {
		return true
	}
	next := ca.Status.Next
	return next != nil && next.Fingerprint == fp
}

// keyID is the kid of the key a CA certificate wraps.
func keyID(cert *x509.Certificate) (string, error) {
	if cert == nil {
		return "", errors.New("no CA certificate")
	}
	if cert.PublicKey == nil {
		return "", errors.New("the CA certificate has no public key")
	}
	return jwtkey.KeyID(cert.PublicKey)
}

// signsTokens refuses a CA whose key is not for service-account tokens:
// certificates and tokens never share a key.
func signsTokens(ca *rotation.CertificateAuthority) error {
	purpose := ca.Spec.Purpose
	if purpose == "" {
		purpose = rotation.PurposeCertificates
	}
	if purpose != rotation.PurposeServiceAccountTokens {
		return fmt.Errorf("CertificateAuthority %q signs certificates (spec.purpose %s), not service-account tokens: only a CA with spec.purpose %s signs JWTs",
			ca.Name, purpose, rotation.PurposeServiceAccountTokens)
	}
	return nil
}

// ready refuses a CA that has no current key yet or says it cannot sign;
// the answer is retryable (503), as a new CA becomes Ready by itself.
func ready(ca *rotation.CertificateAuthority) error {
	if ca.Status.Current == nil {
		return fmt.Errorf("CertificateAuthority %q is not Ready: it has no current key yet", ca.Name)
	}
	cond := apimeta.FindStatusCondition(ca.Status.Conditions, rotation.CertificateAuthorityReady)
	if cond == nil {
		return fmt.Errorf("CertificateAuthority %q is not Ready: its controller has not reported yet", ca.Name)
	}
	if cond.Status != metav1.ConditionTrue {
		return fmt.Errorf("CertificateAuthority %q is not Ready (%s): %s", ca.Name, cond.Reason, cond.Message)
	}
	return nil
}

// CheckedClaims is what CheckClaims read from the claims.
type CheckedClaims struct {
	IssuedAt, Expiry time.Time
	// Subject is "sub" when it is a string (for the log), else "".
	Subject string
}

// CheckClaims checks claims (unpadded base64url of a JSON object, as
// kube-apiserver sends them) before they are signed with the key of a
// CA configured by keys: exp and iat integers, exp after iat by at most
// maxTokenExpiration, iat within jwtkey.ClockSkew of now, exp no later
// than now + maxTokenExpiration + jwtkey.ExpiryLeeway (so that a rotation
// knows when every token of the old key has expired; with the two rules
// before it this always holds, and it is checked as the bound the
// rotation relies on), nbf (when present) an integer
// not after exp, and iss the configured issuer when one is set; no member
// a case-insensitive verifier could read as another (jwtkey.DecodeClaims).
// The error states the rule broken without the claims.
func CheckClaims(claims string, keys *rotation.ServiceAccountTokenKeys, now time.Time) (CheckedClaims, error) {
	obj, err := jwtkey.DecodeClaims(claims)
	if err != nil {
		return CheckedClaims{}, err
	}
	maxExp := rotationv1alpha1.DefaultMaxTokenExpiration
	issuer := ""
	if keys != nil {
		if keys.MaxTokenExpiration != nil && keys.MaxTokenExpiration.Duration > 0 {
			maxExp = keys.MaxTokenExpiration.Duration
		}
		issuer = keys.Issuer
	}
	iat, err := integerClaim(obj, "iat")
	if err != nil {
		return CheckedClaims{}, err
	}
	exp, err := integerClaim(obj, "exp")
	if err != nil {
		return CheckedClaims{}, err
	}
	if exp <= iat {
		return CheckedClaims{}, fmt.Errorf(`"exp" (%d) must be after "iat" (%d)`, exp, iat)
	}
	// nbf is optional (kube-apiserver sets it to iat); a token that is
	// never valid is refused rather than signed.
	if _, ok := obj["nbf"]; ok {
		nbf, err := integerClaim(obj, "nbf")
		if err != nil {
			return CheckedClaims{}, err
		}
		if nbf > exp {
			return CheckedClaims{}, fmt.Errorf(`"nbf" (%d) must not be after "exp" (%d)`, nbf, exp)
		}
	}
	maxSeconds := int64(maxExp / time.Second)
	// exp > iat, both int64: the difference may overflow only when it is
	// positive and huge, which the unsigned view keeps ordered.
	if lifetime := uint64(exp) - uint64(iat); lifetime > uint64(maxSeconds) {
		return CheckedClaims{}, fmt.Errorf(`"exp" - "iat" is %d s, more than spec.serviceAccountTokens.maxTokenExpiration (%s)`, lifetime, maxExp)
	}
	nowUnix := now.Unix()
	skew := int64(jwtkey.ClockSkew / time.Second)
	if iat < nowUnix-skew || iat > nowUnix+skew {
		return CheckedClaims{}, fmt.Errorf(`"iat" (%d) is more than %s from the server's clock (%d): the clocks of kube-apiserver and rekey-apiserver differ`, iat, jwtkey.ClockSkew, nowUnix)
	}
	if latest := nowUnix + maxSeconds + int64(jwtkey.ExpiryLeeway/time.Second); exp > latest {
		return CheckedClaims{}, fmt.Errorf(`"exp" (%d) is later than now + spec.serviceAccountTokens.maxTokenExpiration (%s) + %s (%d)`, exp, maxExp, jwtkey.ExpiryLeeway, latest)
	}
	if issuer != "" {
		raw, ok := obj["iss"]
		if !ok {
			return CheckedClaims{}, fmt.Errorf(`"iss" is missing: spec.serviceAccountTokens.issuer is %q`, issuer)
		}
		var iss string
		if err := json.Unmarshal(raw, &iss); err != nil {
			return CheckedClaims{}, errors.New(`"iss" must be a string`)
		}
		if iss != issuer {
			return CheckedClaims{}, fmt.Errorf(`"iss" must be spec.serviceAccountTokens.issuer %q`, issuer)
		}
	}
	out := CheckedClaims{IssuedAt: time.Unix(iat, 0), Expiry: time.Unix(exp, 0)}
	if raw, ok := obj["sub"]; ok {
		_ = json.Unmarshal(raw, &out.Subject) // only logged; not a string logs ""
	}
	return out, nil
}

// integerClaim reads a NumericDate claim that must be a JSON integer (no
// fraction, no exponent), as kube-apiserver writes them.
func integerClaim(obj map[string]json.RawMessage, name string) (int64, error) {
	raw, ok := obj[name]
	if !ok {
		return 0, fmt.Errorf("%q is missing", name)
	}
	// The raw JSON text: a quoted number, a fraction or an exponent does
	// not parse (json.Number would take the first).
	v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q must be an integer number of seconds", name)
	}
	return v, nil
}
