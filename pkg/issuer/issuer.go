// Package issuer decides and signs one certificate request. It is the one
// place rekey issues a certificate, whichever path asks: the write that
// approves a request (/approval), the create of a request its signer
// approves without a person (NodeClient), or, for what those cannot do at
// that moment, the signer and approver controllers.
package issuer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/authority"
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
)

// Recorder records issuances before their certificates are published.
type Recorder interface {
	Record(ctx context.Context, rec issuance.Record) error
}

// Decision is a condition the outcome adds: its reason and message.
type Decision struct {
	Reason, Message string
}

// Outcome is what was decided for one request. At most one of Certificate
// and Failure is set; an empty Outcome means "nothing decided now": the
// request is stored as it is and the controllers take it from there.
type Outcome struct {
	// Approval is set when the request was approved without a person
	// (create-time approval); it becomes the Approved condition.
	Approval *Decision
	// Certificate is the issued certificate (PEM), already recorded.
	Certificate []byte
	// Failure is the rule the request broke; it becomes the Failed
	// condition.
	Failure *Decision
	// Attestation is what the Attestation approval mode verified, or why
	// it refused; it becomes the Attested condition.
	Attestation *Attestation
}

// Attestation is the outcome of verifying a request's TPM evidence.
type Attestation struct {
	// Passed: the evidence answered the node's challenge under its policy.
	Passed bool
	Decision
}

// Signing signs requests for the signers Signer objects declare, with their
// CAs' keys, under their policies.
type Signing struct {
	Authorities *authority.Authorities
	Recorder    Recorder
	Clock       clock.PassiveClock
}

// Sign issues a certificate for an approved request under the signer's
// policy and records it before returning it, or returns the rule the
// request broke. approvedAt is when it was approved, for the
// approval-to-certificate metric. An error means nothing was decided (the
// CA cannot sign now, the record could not be written): try again later.
func (s *Signing) Sign(ctx context.Context, signer *certv1alpha1.Signer, csr *certv1alpha1.CertificateSigningRequest, approvedAt time.Time, path string) (Outcome, error) {
	signerName := csr.Spec.SignerName
	req, err := validation.ParseStoredCSR(csr.Spec.Request)
	if err != nil {
		requestsTotal.WithLabelValues(signerName, "failed", path).Inc()
		return Outcome{Failure: &Decision{Reason: ReasonInvalidRequest, Message: err.Error()}}, nil
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
		return Outcome{Failure: &Decision{Reason: reason, Message: fmt.Sprintf("signer %s refused the request: %s", signerName, violation.Error())}}, nil
	}
	if err != nil {
		return Outcome{}, err
	}
	auth, err := s.Authorities.Get(ctx, signer.Spec.CertificateAuthorityRef.Name)
	if err != nil {
		signingErrors.WithLabelValues(signerName, "ca_unavailable").Inc()
		requestsTotal.WithLabelValues(signerName, "error", path).Inc()
		return Outcome{}, fmt.Errorf("signer %s: %w", signerName, err)
	}
	now := s.Clock.Now()
	certPEM, cert, err := signing.Issue(signing.Issuance{
		Request: req, KeyUsage: decision.KeyUsage, ExtKeyUsage: decision.ExtKeyUsage, Duration: decision.Duration, Now: now,
	}, auth.Cert, auth.Signer)
	if err != nil {
		signingErrors.WithLabelValues(signerName, "sign").Inc()
		requestsTotal.WithLabelValues(signerName, "error", path).Inc()
		return Outcome{}, fmt.Errorf("signer %s: %w", signerName, err)
	}
	serial := fmt.Sprintf("%x", cert.SerialNumber)
	if err := s.Recorder.Record(ctx, issuance.Record{
		Serial: serial, CSRName: csr.Name, CSRUID: string(csr.UID), Requester: csr.Spec.Username, Subject: cert.Subject.String(),
		SignerName: signerName, CAName: auth.Name, CAKeyID: auth.KeyID, NotBefore: cert.NotBefore, NotAfter: cert.NotAfter,
	}); err != nil {
		signingErrors.WithLabelValues(signerName, "record").Inc()
		requestsTotal.WithLabelValues(signerName, "error", path).Inc()
		return Outcome{}, err
	}
	requestsTotal.WithLabelValues(signerName, "issued", path).Inc()
	requestedDuration.WithLabelValues(signerName).Observe(decision.Requested.Seconds())
	honoredDuration.WithLabelValues(signerName).Observe(cert.NotAfter.Sub(now).Seconds())
	if !approvedAt.IsZero() {
		approvalToCertificate.WithLabelValues(signerName).Observe(max(now.Sub(approvedAt).Seconds(), 0))
	}
	klog.FromContext(ctx).V(2).Info("Issued certificate", "csr", csr.Name, "signerName", signerName, "serial", serial, "notAfter", cert.NotAfter, "path", path)
	return Outcome{Certificate: certPEM}, nil
}
