package certificatesigningrequest

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apis/message"
	"rekey.io/rekey/pkg/registry/printers"
)

// ReasonIssued is the reason of the Issued condition.
const ReasonIssued = "CertificateIssued"

// issuedCondition is the Issued condition for a certificate, stamped now.
// Its message names what a person checks first: the issuer, the serial
// and the expiry (the certificate is in status.certificate for the rest).
func issuedCondition(cert []byte, now metav1.Time) certificates.CertificateSigningRequestCondition {
	msg := "the certificate is in status.certificate"
	if c := firstCertificate(cert); c != nil {
		msg = printers.IssuedSummary(c)
	}
	return certificates.CertificateSigningRequestCondition{
		Type: certificates.CertificateIssued, Status: metav1.ConditionTrue, Reason: ReasonIssued, Message: message.Cap(msg),
		LastUpdateTime: now, LastTransitionTime: now,
	}
}

// firstCertificate is the issued certificate of status.certificate (the
// first block), or nil when it does not parse (validation has refused
// such a write before this is asked).
func firstCertificate(data []byte) *x509.Certificate {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil
	}
	return c
}

// serialHex is a serial as lower-case hex of whole bytes without colons,
// as openssl prints it (without the colons) and `kubectl rekey revoke
// --serial` takes it.
func serialHex(c *x509.Certificate) string {
	return printers.SerialHex(c.SerialNumber)
}

// keepIssued makes the Issued condition the server's, whatever the writer
// sent: a stored one is put back as it was (a write from a copy read
// before the certificate does not drop it, and none edits it); a write
// that sets the certificate gets one, stamped now; a request stored with a
// certificate but no condition (issued before the condition existed) gets
// one at its next write. An Issued condition a client adds without a
// certificate is left for forbidIssued to refuse, as silently dropping it
// would tell the client its write did what it asked.
func keepIssued(newCSR, oldCSR *certificates.CertificateSigningRequest, now time.Time) {
	var kept []certificates.CertificateSigningRequestCondition
	for _, c := range newCSR.Status.Conditions {
		if c.Type != certificates.CertificateIssued {
			kept = append(kept, c)
		}
	}
	switch old := certificates.GetCondition(oldCSR, certificates.CertificateIssued); {
	case old != nil:
		kept = append(kept, *old)
	case len(newCSR.Status.Certificate) > 0:
		kept = append(kept, issuedCondition(newCSR.Status.Certificate, metav1.NewTime(now)))
	default:
		if added := certificates.GetCondition(newCSR, certificates.CertificateIssued); added != nil {
			kept = append(kept, *added)
		}
	}
	newCSR.Status.Conditions = kept
}

// forbidIssued refuses an Issued condition on a request without a
// certificate (keepIssued has made every other one the server's).
func forbidIssued(newCSR *certificates.CertificateSigningRequest) field.ErrorList {
	if len(newCSR.Status.Certificate) > 0 || certificates.GetCondition(newCSR, certificates.CertificateIssued) == nil {
		return nil
	}
	return field.ErrorList{field.Forbidden(field.NewPath("status", "conditions"),
		fmt.Sprintf("a condition of type %q is recorded by rekey when status.certificate is set; set the certificate through /status instead", certificates.CertificateIssued))}
}
