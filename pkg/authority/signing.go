package authority

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/policy"
	"rekey.io/rekey/pkg/signing"
)

// Failed condition reasons.
const (
	ReasonPolicyViolation = "SignerPolicyViolation"
	ReasonInvalidRequest  = "InvalidRequest"
)

// Paths a certificate is issued on, as the metrics label them.
const (
	PathApproval   = "approval"
	PathCreate     = "create"
	PathController = "controller"
	// PathHostCluster is the host cluster's own certificates.k8s.io/v1
	// CertificateSigningRequests (package hostcsr).
	PathHostCluster = "hostcluster"
	// PathPodCertificate is the host cluster's PodCertificateRequests
	// (package podcert).
	PathPodCertificate = "podcertificate"
)

// Recorder records issuances before their certificates are published.
type Recorder interface {
	Record(ctx context.Context, rec issuance.Record) error
}

// Decision is a condition an outcome adds: its reason and message.
type Decision struct {
	Reason, Message string
}

// Signed is what Sign decided: a certificate (PEM, already recorded) or
// the rule the request broke, never both.
type Signed struct {
	Certificate []byte
	Failure     *Decision
	// Leaf is the certificate parsed, and CA the certificate of the CA
	// that signed it, when one was issued.
	Leaf, CA *x509.Certificate
}

// Signing signs requests for the signers Signer objects declare, with their
// CAs' keys, under their policies.
type Signing struct {
	Authorities *Authorities
	Recorder    Recorder
	Clock       clock.PassiveClock
}

// Sign issues a certificate for an approved request under the signer's
// policy and records it before returning it, or returns the rule the
// request broke. approvedAt is when it was approved, for the
// approval-to-certificate metric. An error means nothing was decided (the
// CA cannot sign now, the record could not be written): try again later.
func (s *Signing) Sign(ctx context.Context, signer *certv1alpha1.Signer, csr *certv1alpha1.CertificateSigningRequest, approvedAt time.Time, path string) (Signed, error) {
	req, err := validation.ParseStoredCSR(csr.Spec.Request)
	if err != nil {
		requestsTotal.WithLabelValues(csr.Spec.SignerName, "failed", path).Inc()
		return Signed{Failure: &Decision{Reason: ReasonInvalidRequest, Message: err.Error()}}, nil
	}
	return s.issue(ctx, signer, issueRequest{
		name: csr.Name, uid: string(csr.UID), spec: &csr.Spec, req: req, approvedAt: approvedAt, path: path,
	})
}

// Template is a request rekey builds itself instead of receiving it as
// PKCS#10 (a host cluster PodCertificateRequest's): what the certificate
// is to hold, for the signer's policy to judge like any request.
type Template struct {
	// Request holds the subject, the subject alternative names and the
	// public key (PublicKey and RawSubjectPublicKeyInfo); its signature is
	// not looked at here.
	Request *x509.CertificateRequest
	// Spec is what the policy reads besides the request: SignerName,
	// Usages, ExpirationSeconds (the lifetime asked for) and Username (the
	// requester the issuance record names).
	Spec certv1alpha1.CertificateSigningRequestSpec
	// Name and UID name the request in the issuance record.
	Name, UID string
	// Requester, when set, is the requester the issuance record names
	// instead of Spec.Username: a rotation counts a certificate as
	// renewed once the new key certified the same subject for the same
	// requester, so it must name what holds the certificate (a pod, not
	// its service account, whose many pods share it).
	Requester string
	// Backdate is how far before now the certificate starts; zero is
	// signing.Backdate. Unlike Sign's, the certificate's lifetime (notBefore
	// to notAfter) is exactly the duration the policy grants, backdate
	// included, so that it never exceeds what was asked for.
	Backdate time.Duration
	// MinLifetime: a certificate that would live less (a shorter
	// maxDuration, a CA that expires sooner) is not issued but a Failure
	// with reason ReasonLifetimeTooShort.
	MinLifetime time.Duration
}

// ReasonLifetimeTooShort is the failure of a Template whose certificate
// would live less than its MinLifetime.
const ReasonLifetimeTooShort = "LifetimeTooShort"

// SignTemplate issues a certificate for a request rekey built itself
// (Template), with everything Sign does: the signer's policy, its CA,
// the issuance record before returning, the metrics under path. The
// result and the errors are Sign's.
func (s *Signing) SignTemplate(ctx context.Context, signer *certv1alpha1.Signer, t Template, path string) (Signed, error) {
	backdate := t.Backdate
	if backdate <= 0 {
		backdate = signing.Backdate
	}
	return s.issue(ctx, signer, issueRequest{
		name: t.Name, uid: t.UID, requester: t.Requester, spec: &t.Spec, req: t.Request, path: path,
		exactLifetime: true, backdate: backdate, minLifetime: t.MinLifetime,
	})
}

// issueRequest is what Sign and SignTemplate share with issue.
type issueRequest struct {
	name, uid string
	// requester overrides spec.Username in the issuance record.
	requester  string
	spec       *certv1alpha1.CertificateSigningRequestSpec
	req        *x509.CertificateRequest
	approvedAt time.Time
	path       string
	// exactLifetime makes notAfter - notBefore the granted duration
	// (backdate included), with backdate set; otherwise notAfter is the
	// signing time plus the duration and notBefore is signing.Backdate
	// earlier.
	exactLifetime bool
	backdate      time.Duration
	minLifetime   time.Duration
}

// issue evaluates the policy, signs with the signer's CA and records the
// issuance, counting the outcome in the metrics.
func (s *Signing) issue(ctx context.Context, signer *certv1alpha1.Signer, r issueRequest) (Signed, error) {
	signerName, path := r.spec.SignerName, r.path
	decision, err := policy.Evaluate(&signer.Spec.Policy, r.spec, r.req)
	var violation *policy.Violation
	if errors.As(err, &violation) {
		requestsTotal.WithLabelValues(signerName, "failed", path).Inc()
		signingErrors.WithLabelValues(signerName, "policy").Inc()
		reason := ReasonPolicyViolation
		if violation.Reason != "" {
			reason = violation.Reason
		}
		return Signed{Failure: &Decision{Reason: reason, Message: fmt.Sprintf("signer %s refused the request: %s", signerName, violation.Error())}}, nil
	}
	if err != nil {
		return Signed{}, err
	}
	if err := s.Authorities.CheckIssuesCertificates(signer.Spec.CertificateAuthorityRef.Name); err != nil {
		signingErrors.WithLabelValues(signerName, "ca_purpose").Inc()
		requestsTotal.WithLabelValues(signerName, "error", path).Inc()
		return Signed{}, fmt.Errorf("signer %s: %w", signerName, err)
	}
	auth, err := s.Authorities.Get(ctx, signer.Spec.CertificateAuthorityRef.Name)
	if err != nil {
		signingErrors.WithLabelValues(signerName, "ca_unavailable").Inc()
		requestsTotal.WithLabelValues(signerName, "error", path).Inc()
		return Signed{}, fmt.Errorf("signer %s: %w", signerName, err)
	}
	now := s.Clock.Now()
	in := signing.Issuance{
		Request: r.req, KeyUsage: decision.KeyUsage, ExtKeyUsage: decision.ExtKeyUsage, Duration: decision.Duration, Now: now,
		CRLDistributionPoints: crlDistributionPoints(signer.Spec.Policy.CRLDistributionPoints, auth),
	}
	if r.exactLifetime {
		in.Backdate = r.backdate
		in.Duration = decision.Duration - r.backdate
		notBefore, notAfter := now.Add(-r.backdate), now.Add(in.Duration)
		if notAfter.After(auth.Cert.NotAfter) {
			notAfter = auth.Cert.NotAfter
		}
		if lifetime := notAfter.Sub(notBefore); lifetime < r.minLifetime {
			requestsTotal.WithLabelValues(signerName, "failed", path).Inc()
			signingErrors.WithLabelValues(signerName, "policy").Inc()
			return Signed{Failure: &Decision{Reason: ReasonLifetimeTooShort, Message: fmt.Sprintf(
				"signer %s would issue a certificate living %s, less than %s (spec.policy.maxDuration %s, CA %s expires %s)",
				signerName, lifetime.Round(time.Second), r.minLifetime, signer.Spec.Policy.MaxDuration.Duration, auth.Name, auth.Cert.NotAfter.UTC().Format(time.RFC3339))}}, nil
		}
	}
	certPEM, cert, err := signing.Issue(in, auth.Cert, auth.Signer)
	if err != nil {
		signingErrors.WithLabelValues(signerName, "sign").Inc()
		requestsTotal.WithLabelValues(signerName, "error", path).Inc()
		return Signed{}, fmt.Errorf("signer %s: %w", signerName, err)
	}
	serial := fmt.Sprintf("%x", cert.SerialNumber)
	requester := r.spec.Username
	if r.requester != "" {
		requester = r.requester
	}
	if err := s.Recorder.Record(ctx, issuance.Record{
		Serial: serial, CSRName: r.name, CSRUID: r.uid, Requester: requester, Subject: cert.Subject.String(), Holder: Holder(cert),
		SignerName: signerName, CAName: auth.Name, CAKeyID: auth.KeyID, NotBefore: cert.NotBefore, NotAfter: cert.NotAfter, SHA256: issuance.SHA256(cert),
	}); err != nil {
		requestsTotal.WithLabelValues(signerName, "error", path).Inc()
		if errors.Is(err, issuance.ErrKeyRetired) {
			// This replica's view of the CA is stale: a completed rotation
			// retired the key it signed with. Nothing is published; the
			// binding is read again for the next request.
			signingErrors.WithLabelValues(signerName, "key_retired").Inc()
			s.Authorities.Forget(auth.Name)
			klog.FromContext(ctx).Info("Refused to issue a certificate signed by a retired CA key; its record was not written and it is not published",
				"csr", r.name, "signerName", signerName, "ca", auth.Name, "keyID", auth.KeyID, "serial", serial, "path", path)
			return Signed{}, fmt.Errorf("signer %s: %w", signerName, err)
		}
		signingErrors.WithLabelValues(signerName, "record").Inc()
		return Signed{}, err
	}
	requestsTotal.WithLabelValues(signerName, "issued", path).Inc()
	requestedDuration.WithLabelValues(signerName).Observe(decision.Requested.Seconds())
	honoredDuration.WithLabelValues(signerName).Observe(cert.NotAfter.Sub(now).Seconds())
	if !r.approvedAt.IsZero() {
		approvalToCertificate.WithLabelValues(signerName).Observe(max(now.Sub(r.approvedAt).Seconds(), 0))
	}
	klog.FromContext(ctx).V(2).Info("Issued certificate", "csr", r.name, "signerName", signerName, "serial", serial, "notAfter", cert.NotAfter, "path", path)
	return Signed{Certificate: certPEM, Leaf: cert, CA: auth.Cert}, nil
}

// ErrNotForCertificates is the error of CheckIssuesCertificates (and so
// of Sign and SignTemplate) for a CA whose key signs service-account
// tokens.
var ErrNotForCertificates = errors.New("its key signs service-account tokens (spec.purpose ServiceAccountTokens), never certificates")

// CheckIssuesCertificates refuses a CA whose key signs service-account
// tokens: a certificate signed by it would tie the key kube-apiserver
// trusts for tokens to whatever trusts the certificate, and a key is for
// one purpose only. A CA the informer does not hold passes: Get says it
// is missing.
func (a *Authorities) CheckIssuesCertificates(name string) error {
	ca, err := a.Lister.Get(name)
	if err != nil || ca.Spec.Purpose != rotationv1alpha1.PurposeServiceAccountTokens {
		return nil
	}
	return fmt.Errorf("CertificateAuthority %q issues no certificates: %w; use a CertificateAuthority with purpose Certificates", name, ErrNotForCertificates)
}

// crlDistributionPoints are the signer's CRL distribution point templates
// filled in for the CA key that signs: a certificate names the CRL of the
// key that signed it, which lists it until that key is destroyed.
func crlDistributionPoints(templates []string, auth *Authority) []string {
	if len(templates) == 0 {
		return nil
	}
	out := make([]string, len(templates))
	for i, t := range templates {
		out[i] = validation.ExpandCRLDistributionPoint(t, auth.Name, auth.KeyID)
	}
	return out
}

// Holder is the user a client certificate authenticates as (its subject
// common name, as kube-apiserver maps it), or "" for a certificate that
// is not for client authentication.
func Holder(cert *x509.Certificate) string {
	if slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return cert.Subject.CommonName
	}
	return ""
}
