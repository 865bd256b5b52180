package issuer

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"rekey.io/rekey/pkg/apis/certificates"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/policy"
	"rekey.io/rekey/pkg/signing"
)

// DryRun says what the request's signer would do with a request created
// with dryRun=All: the certificate its policy would issue (subject,
// subject alternative names, usages, lifetime, CA), the rule the request
// breaks, or why nothing would decide it. It runs the policy code Sign
// runs on the request as stored (spec.username is the requester's), and
// reads the CA Sign would sign with from its published status (never its
// key: a dry run costs no key store or PKCS#11 call); it signs, records
// and approves nothing. What the requester learns is listed in
// docs/security.md: the answer is theirs to see, but the CA's name, key
// ID and any error text (host paths, PKCS#11 errors) are not. The text is a warning for the dry-run response
// (certv1alpha1.DryRunWarningPrefix).
func (s *Synchronous) DryRun(ctx context.Context, csr *certificates.CertificateSigningRequest) string {
	say := func(format string, args ...any) string {
		return certv1alpha1.DryRunWarningPrefix + fmt.Sprintf(format, args...)
	}
	name := csr.Spec.SignerName
	if s.Synced != nil && !s.Synced() {
		return say("the Signer list is not loaded yet (the server is starting): no decision; retry")
	}
	signer, err := s.served(name)
	if err != nil {
		return say("reading the Signer of %q: %v: no decision", name, err)
	}
	if signer == nil {
		return say("no Signer of this server serves %q: rekey would store the request and never sign it (only an external signer could)", name)
	}
	versioned, err := toVersioned(csr)
	if err != nil {
		return say("%v: no decision", err)
	}
	req, err := validation.ParseStoredCSR(csr.Spec.Request)
	if err != nil {
		return say("signer %q would refuse: reason %s: %v", name, ReasonInvalidRequest, err)
	}
	decision, err := policy.Evaluate(&signer.Spec.Policy, &versioned.Spec, req)
	var violation *policy.Violation
	if errors.As(err, &violation) {
		reason := ReasonPolicyViolation
		if violation.Reason != "" {
			reason = violation.Reason
		}
		return say("signer %q would refuse: reason %s: %s", name, reason, violation.Error())
	}
	if err != nil {
		return say("signer %q: %v: no decision", name, err)
	}
	caCert := s.publishedCA(signer.Spec.CertificateAuthorityRef.Name)
	if caCert == nil {
		return say("signer %q cannot sign now: its CA is not ready (the request would wait until it is)", name)
	}
	fields := []string{
		fmt.Sprintf("subject %q", req.Subject.String()),
		"subject alternative names " + sans(req),
		fmt.Sprintf("key %s", keyDescription(req)),
		"usages " + usages(versioned.Spec.Usages),
		lifetime(signer, decision, caCert, s.Signing.Clock.Now()),
		fmt.Sprintf("CA %s (fingerprint %s)", caCert.Subject.String(), signing.Fingerprint(caCert)),
		approval(signer),
	}
	return say("signer %q%s%s", name, certv1alpha1.DryRunWouldIssue, strings.Join(fields, "; "))
}

// publishedCA is the certificate the CertificateAuthority publishes in
// status.current while its Ready condition is True, or nil: a missing,
// unready or unparsable CA is only "not ready" to the requester, whose
// dry run must not echo the CA's own error.
func (s *Synchronous) publishedCA(name string) *x509.Certificate {
	ca, err := s.Signing.Authorities.Lister.Get(name)
	if err != nil || ca.Status.Current == nil || !meta.IsStatusConditionTrue(ca.Status.Conditions, rotationv1alpha1.CertificateAuthorityReady) {
		return nil
	}
	cert, err := authority.ParseCertificatePEM(ca.Status.Current.Certificate)
	if err != nil {
		return nil
	}
	return cert
}

func sans(req *x509.CertificateRequest) string {
	var out []string
	for _, n := range req.DNSNames {
		out = append(out, "DNS:"+n)
	}
	for _, ip := range req.IPAddresses {
		out = append(out, "IP:"+ip.String())
	}
	for _, e := range req.EmailAddresses {
		out = append(out, "email:"+e)
	}
	for _, u := range req.URIs {
		out = append(out, "URI:"+u.String())
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func keyDescription(req *x509.CertificateRequest) string {
	switch k := req.PublicKey.(type) {
	case *ecdsa.PublicKey:
		return "ECDSA " + k.Curve.Params().Name
	case *rsa.PublicKey:
		return fmt.Sprintf("RSA %d", k.N.BitLen())
	case ed25519.PublicKey:
		return "Ed25519"
	}
	return req.PublicKeyAlgorithm.String()
}

func usages(us []certv1alpha1.KeyUsage) string {
	if len(us) == 0 {
		return "none"
	}
	s := make([]string, len(us))
	for i, u := range us {
		s[i] = string(u)
	}
	return strings.Join(s, ", ")
}

// lifetime is what Sign would grant: the policy's duration, cut at the
// CA's own expiry, counted from now.
func lifetime(signer *certv1alpha1.Signer, d policy.Decision, ca *x509.Certificate, now time.Time) string {
	notAfter := now.Add(d.Duration)
	why := ""
	switch {
	case notAfter.After(ca.NotAfter):
		notAfter = ca.NotAfter
		why = fmt.Sprintf(", cut at the CA's expiry, asked %s", d.Requested)
	case d.Duration < d.Requested:
		why = fmt.Sprintf(", capped by spec.policy.maxDuration %s, asked %s", signer.Spec.Policy.MaxDuration.Duration, d.Requested)
	}
	return fmt.Sprintf("lifetime %s (until about %s%s)", notAfter.Sub(now).Round(time.Second), notAfter.UTC().Format(time.RFC3339), why)
}

func approval(signer *certv1alpha1.Signer) string {
	mode := signer.Spec.Approval.Mode
	if mode == "" {
		mode = certv1alpha1.ApprovalManual
	}
	switch mode {
	case certv1alpha1.ApprovalManual:
		return "approval Manual: issued once someone with verb approve on the signer approves it"
	default:
		return fmt.Sprintf("approval %s: decided at create, which a dry run does not do", mode)
	}
}
