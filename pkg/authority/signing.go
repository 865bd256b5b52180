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
	signerName := csr.Spec.SignerName
	req, err := validation.ParseStoredCSR(csr.Spec.Request)
	if err != nil {
		requestsTotal.WithLabelValues(signerName, "failed", path).Inc()
		return Signed{Failure: &Decision{Reason: ReasonInvalidRequest, Message: err.Error()}}, nil
	}
	decision, err := policy.Evaluate(&signer.Spec.Policy, &csr.Spec, req)
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
	auth, err := s.Authorities.Get(ctx, signer.Spec.CertificateAuthorityRef.Name)
	if err != nil {
		signingErrors.WithLabelValues(signerName, "ca_unavailable").Inc()
		requestsTotal.WithLabelValues(signerName, "error", path).Inc()
		return Signed{}, fmt.Errorf("signer %s: %w", signerName, err)
	}
	now := s.Clock.Now()
	certPEM, cert, err := signing.Issue(signing.Issuance{
		Request: req, KeyUsage: decision.KeyUsage, ExtKeyUsage: decision.ExtKeyUsage, Duration: decision.Duration, Now: now,
	}, auth.Cert, auth.Signer)
	if err != nil {
		signingErrors.WithLabelValues(signerName, "sign").Inc()
		requestsTotal.WithLabelValues(signerName, "error", path).Inc()
		return Signed{}, fmt.Errorf("signer %s: %w", signerName, err)
	}
	serial := fmt.Sprintf("%x", cert.SerialNumber)
	if err := s.Recorder.Record(ctx, issuance.Record{
		Serial: serial, CSRName: csr.Name, CSRUID: string(csr.UID), Requester: csr.Spec.Username, Subject: cert.Subject.String(), Holder: Holder(cert),
		SignerName: signerName, CAName: auth.Name, CAKeyID: auth.KeyID, NotBefore: cert.NotBefore, NotAfter: cert.NotAfter,
	}); err != nil {
		signingErrors.WithLabelValues(signerName, "record").Inc()
		requestsTotal.WithLabelValues(signerName, "error", path).Inc()
		return Signed{}, err
	}
	requestsTotal.WithLabelValues(signerName, "issued", path).Inc()
	requestedDuration.WithLabelValues(signerName).Observe(decision.Requested.Seconds())
	honoredDuration.WithLabelValues(signerName).Observe(cert.NotAfter.Sub(now).Seconds())
	if !approvedAt.IsZero() {
		approvalToCertificate.WithLabelValues(signerName).Observe(max(now.Sub(approvedAt).Seconds(), 0))
	}
	klog.FromContext(ctx).V(2).Info("Issued certificate", "csr", csr.Name, "signerName", signerName, "serial", serial, "notAfter", cert.NotAfter, "path", path)
	return Signed{Certificate: certPEM}, nil
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
