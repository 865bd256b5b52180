package v1alpha1

// What a dry-run create of a CertificateSigningRequest (dryRun=All) says
// about the request's signer: rekey runs the Signer's policy on the
// request, as the requester, and returns the decision as a warning that
// starts with DryRunWarningPrefix (`kubectl create --dry-run=server` shows
// it; `kubectl rekey request --dry-run` prints it). Nothing is signed or
// stored.
const (
	// DryRunWarningPrefix starts the warning of a dry-run create.
	DryRunWarningPrefix = "rekey dry run: "
	// DryRunWouldIssue follows the signer's name in the warning of a
	// request the policy allows; "; "-separated fields follow it. Any
	// other warning with the prefix is a refusal, or no decision.
	DryRunWouldIssue = " would issue: "
)
