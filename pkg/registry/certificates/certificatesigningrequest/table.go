package certificatesigningrequest

import (
	"context"
	"crypto/x509"
	"strings"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/registry/printers"
)

// SignerGetter reads a Signer by object name (the Signer storage).
type SignerGetter interface {
	Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error)
}

// signerLookup is the Signer storage the table reads policies from, set
// once the server has made it (Storage.UseSigners); without one the
// table shows what was requested.
type signerLookup struct {
	getter atomic.Pointer[SignerGetter]
}

// policy is the policy of the Signer serving signerName, or nil.
func (l *signerLookup) policy(ctx context.Context, signerName string) *certificates.SignerPolicy {
	g := l.getter.Load()
	if g == nil {
		return nil
	}
	// From the watch cache: a table may list many requests, and a policy
	// a moment old is good enough to print.
	obj, err := (*g).Get(ctx, validation.SignerObjectName(signerName), &metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return nil
	}
	s, ok := obj.(*certificates.Signer)
	if !ok || s.Spec.SignerName != signerName {
		return nil
	}
	return &s.Spec.Policy
}

// newTable prints the columns `kubectl get csr` shows, as kubectl prints
// certificates.k8s.io requests (NAME, AGE, SIGNERNAME, REQUESTOR,
// REQUESTEDDURATION, CONDITION), then the certificate's NOTAFTER and, with
// -o wide, its issuer and serial.
func newTable(signers *signerLookup) printers.Table[*certificates.CertificateSigningRequest] {
	return printers.Table[*certificates.CertificateSigningRequest]{
		Columns: []metav1.TableColumnDefinition{
			{Name: "Age", Type: "string", Description: "Time since the request was created."},
			{Name: "SignerName", Type: "string", Description: "The signer asked to sign the request."},
			{Name: "Requestor", Type: "string", Description: "The authenticated user who created the request."},
			{Name: "RequestedDuration", Type: "string", Description: "The certificate's lifetime: the issued certificate's; before that, what the request's Signer grants " +
				"(spec.expirationSeconds, else the Signer's defaultDuration, at most its maxDuration); for a signer rekey does not serve, what was requested."},
			{Name: "Condition", Type: "string", Description: "The request's conditions (Approved, Denied, Failed, Issued, Revoked; Type=Status when not True), or Pending."},
			{Name: "NotAfter", Type: "string", Description: "End of the issued certificate's validity."},
			{Name: "Issuer", Type: "string", Priority: 1, Description: "The common name of the CA certificate that signed the certificate."},
			{Name: "Serial", Type: "string", Priority: 1, Description: "The certificate's serial number in hex."},
		},
		RowContext: func(ctx context.Context, csr *certificates.CertificateSigningRequest) []interface{} {
			notAfter, issuerName, serial := "<none>", "<none>", "<none>"
			cert := firstCertificate(csr.Status.Certificate)
			if cert != nil {
				notAfter, issuerName, serial = printers.NotAfter(cert.NotAfter), issuerOf(cert), serialHex(cert)
			}
			return []interface{}{printers.Age(csr.CreationTimestamp), csr.Spec.SignerName, csr.Spec.Username,
				effectiveDuration(ctx, signers, csr, cert), ConditionSummary(csr), notAfter, issuerName, serial}
		},
	}
}

// issuerOf is the issuer's common name, or its whole name without one.
func issuerOf(cert *x509.Certificate) string {
	if cert.Issuer.CommonName != "" {
		return cert.Issuer.CommonName
	}
	if s := cert.Issuer.String(); s != "" {
		return s
	}
	return "<none>"
}

// effectiveDuration is the REQUESTEDDURATION cell: the lifetime the
// certificate has or will have, which is what a person reading the table
// wants to know (a requested 30 days that the Signer caps at 24 hours is
// 24 hours).
func effectiveDuration(ctx context.Context, signers *signerLookup, csr *certificates.CertificateSigningRequest, cert *x509.Certificate) string {
	if cert != nil {
		// From the moment it was issued, not from notBefore, which is
		// backdated to absorb clock skew.
		from := cert.NotBefore
		if c := certificates.GetCondition(csr, certificates.CertificateIssued); c != nil && c.LastTransitionTime.After(from) {
			from = c.LastTransitionTime.Time
		}
		return humanDuration(cert.NotAfter.Sub(from))
	}
	var requested time.Duration
	if csr.Spec.ExpirationSeconds != nil {
		requested = time.Duration(*csr.Spec.ExpirationSeconds) * time.Second
	}
	if p := signers.policy(ctx, csr.Spec.SignerName); p != nil {
		// As pkg/policy grants it.
		granted := p.MaxDuration.Duration
		if p.DefaultDuration != nil {
			granted = p.DefaultDuration.Duration
		}
		if requested > 0 {
			granted = requested
		}
		return humanDuration(min(granted, p.MaxDuration.Duration))
	}
	if requested > 0 {
		return humanDuration(requested)
	}
	return "<none>"
}

// humanDuration prints a lifetime to the minute, as kubectl prints a
// requested duration.
func humanDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return duration.HumanDuration(d.Round(time.Minute))
}

// ConditionSummary is the CONDITION column: the condition types in order,
// each as Type=Status when its status is not True (Attested=False), and
// Issued once a certificate is present; "Pending" when there is none.
func ConditionSummary(csr *certificates.CertificateSigningRequest) string {
	var parts []string
	for _, c := range csr.Status.Conditions {
		if c.Status == metav1.ConditionTrue || c.Status == "" {
			parts = append(parts, string(c.Type))
		} else {
			parts = append(parts, string(c.Type)+"="+string(c.Status))
		}
	}
	// A request issued before the Issued condition existed.
	if len(csr.Status.Certificate) > 0 && certificates.GetCondition(csr, certificates.CertificateIssued) == nil {
		parts = append(parts, "Issued")
	}
	if len(parts) == 0 {
		return "Pending"
	}
	return strings.Join(parts, ",")
}
