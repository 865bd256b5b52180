// Package issuer decides and signs one certificate request. It is the one
// place rekey issues a certificate, whichever path asks: the write that
// approves a request (/approval), the create of a request its signer
// approves without a person (NodeClient), or, for what those cannot do at
// that moment, the signer and approver controllers.
package issuer

import (
	"rekey.io/rekey/pkg/authority"
)

// Failed condition reasons (package authority signs; these are its).
const (
	ReasonPolicyViolation = authority.ReasonPolicyViolation
	ReasonInvalidRequest  = authority.ReasonInvalidRequest
)

// Paths a certificate is issued on, as the metrics label them.
const (
	PathApproval   = authority.PathApproval
	PathCreate     = authority.PathCreate
	PathController = authority.PathController
)

// Recorder records issuances before their certificates are published.
type Recorder = authority.Recorder

// Decision is a condition the outcome adds: its reason and message.
type Decision = authority.Decision

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

// outcome is what Sign decided, as an Outcome.
func outcome(s authority.Signed) Outcome {
	return Outcome{Certificate: s.Certificate, Failure: s.Failure}
}
