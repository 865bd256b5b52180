package nodeattest

import (
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"strings"

	attv1alpha1 "rekey.io/rekey/pkg/apis/attestation/v1alpha1"
	"rekey.io/rekey/pkg/attest"
	"rekey.io/rekey/pkg/strictpem"
)

// maxBundleCertificates bounds the certificates read from a policy bundle
// (validation has refused larger ones already).
const maxBundleCertificates = 256

// VerifierPolicy converts an AttestationPolicy (defaulted and validated as
// stored) to the verifier's form.
func VerifierPolicy(p *attv1alpha1.AttestationPolicy) (attest.Policy, error) {
	s := &p.Spec
	out := attest.Policy{
		Name:            p.Name,
		AllowedEKs:      map[string]bool{},
		PCRs:            map[int][]byte{},
		TrustOnFirstUse: s.PCRPolicy.Mode != attv1alpha1.PCRModeFixed,
	}
	var err error
	if out.Roots, err = pool(s.EKRootCertificates); err != nil {
		return attest.Policy{}, fmt.Errorf("policy %s: ekRootCertificates: %w", p.Name, err)
	}
	if out.Intermediates, err = pool(s.EKIntermediateCertificates); err != nil {
		return attest.Policy{}, fmt.Errorf("policy %s: ekIntermediateCertificates: %w", p.Name, err)
	}
	for _, h := range s.AllowedEKPublicKeyHashes {
		out.AllowedEKs[strings.ToLower(h)] = true
	}
	for _, i := range s.PCRPolicy.Selection {
		out.PCRs[int(i)] = nil
	}
	if !out.TrustOnFirstUse {
		for _, v := range s.PCRPolicy.Values {
			b, err := hex.DecodeString(v.Value)
			if err != nil {
				return attest.Policy{}, fmt.Errorf("policy %s: PCR %d: %w", p.Name, v.Index, err)
			}
			out.PCRs[int(v.Index)] = b
		}
	}
	if s.ChallengeLifetime != nil {
		out.ChallengeLifetime = s.ChallengeLifetime.Duration
	}
	if out.ChallengeLifetime <= 0 {
		out.ChallengeLifetime = attv1alpha1.DefaultChallengeLifetime
	}
	out.MaxAttemptsPerHour = attv1alpha1.DefaultMaxAttemptsPerEKPerHour
	if s.MaxAttemptsPerEKPerHour != nil {
		out.MaxAttemptsPerHour = int(*s.MaxAttemptsPerEKPerHour)
	}
	return out, nil
}

// pool reads a PEM bundle; an empty one is nil (nothing trusted).
func pool(bundle string) (*x509.CertPool, error) {
	if strings.TrimSpace(bundle) == "" {
		return nil, nil
	}
	certs, err := strictpem.Certificates([]byte(bundle), maxBundleCertificates)
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p, nil
}
