package certificates

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Revocation revokes one certificate that rekey issued. kube-apiserver
// refuses the certificate through rekey's authorization webhook (on the
// request's credential-id), rekey refuses it itself, and the certificate's
// CA lists it in its CRL.
//
// A client names the certificate in spec (by its SHA-256 or its serial
// number); the server finds it among the certificates it issued, checks that
// the user may revoke for its signer (verb "revoke" on resource "signers"
// with the signer name, or "<domain>/*"), and fills status. The object's
// name is the certificate's SHA-256 in lowercase hex, so a certificate is
// revoked once however often it is asked. Revocations cannot be changed or
// deleted: rekey deletes one itself once its certificate has expired or the
// CA key that signed it has been destroyed.
type Revocation struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	// spec names the certificate and why it is revoked. Immutable.
	Spec RevocationSpec

	// status is what the server found: the certificate's identity, signer,
	// CA and request, and who revoked it when. Set at create, never changed.
	Status RevocationStatus
}

// RevocationSpec names the certificate to revoke: exactly one of
// certificateSHA256 and serialNumber.
type RevocationSpec struct {
	// certificateSHA256 is the SHA-256 of the certificate's DER in hex (what
	// kube-apiserver's audit log shows as credential-id X509SHA256=<hex>).
	CertificateSHA256 string

	// serialNumber is the certificate's serial number in hex.
	SerialNumber string

	// caName, with serialNumber, is the CertificateAuthority that issued the
	// certificate. Optional: serial numbers are random and rekey looks in
	// every CA when it is empty, refusing a serial that two CAs issued.
	CAName string

	// reason is the RFC 5280 reason: Unspecified (the default),
	// KeyCompromise, CACompromise, AffiliationChanged, Superseded,
	// CessationOfOperation, PrivilegeWithdrawn or AACompromise.
	Reason RevocationReason
}

// RevocationReason is an RFC 5280 CRLReason. certificateHold and
// removeFromCRL are not offered: a revocation is not undone.
type RevocationReason string

// The RFC 5280 reasons (section 5.3.1), with their CRL codes in comments.
const (
	RevocationReasonUnspecified          RevocationReason = "Unspecified"          // 0
	RevocationReasonKeyCompromise        RevocationReason = "KeyCompromise"        // 1
	RevocationReasonCACompromise         RevocationReason = "CACompromise"         // 2
	RevocationReasonAffiliationChanged   RevocationReason = "AffiliationChanged"   // 3
	RevocationReasonSuperseded           RevocationReason = "Superseded"           // 4
	RevocationReasonCessationOfOperation RevocationReason = "CessationOfOperation" // 5
	RevocationReasonPrivilegeWithdrawn   RevocationReason = "PrivilegeWithdrawn"   // 9
	RevocationReasonAACompromise         RevocationReason = "AACompromise"         // 10
)

// RevocationStatus is what the server recorded at create.
type RevocationStatus struct {
	// certificateSHA256 is the SHA-256 of the certificate's DER in hex.
	CertificateSHA256 string

	// serialNumber is the certificate's serial number in hex.
	SerialNumber string

	// signerName is the signer that issued the certificate.
	SignerName string

	// caName is the CertificateAuthority whose key signed the certificate.
	CAName string

	// caKeyID identifies that key (its revocations end with it).
	CAKeyID string

	// subject is the certificate's subject (RFC 2253).
	Subject string

	// requester is the user that requested the certificate.
	Requester string

	// request is the request the certificate was issued for: a rekey
	// CertificateSigningRequest's name, "certificates.k8s.io:<name>" for
	// the host cluster's CertificateSigningRequests, or
	// "pcr:<namespace>/<name>" for its PodCertificateRequests.
	Request string

	// requestUID is that request's UID.
	RequestUID string

	// notAfter is when the certificate expires; rekey deletes the
	// revocation some time after.
	NotAfter metav1.Time

	// revocationTime is when the server accepted the revocation.
	RevocationTime metav1.Time

	// revokedBy is the user that revoked it.
	RevokedBy string
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RevocationList is a list of Revocations.
type RevocationList struct {
	metav1.TypeMeta
	metav1.ListMeta

	// items are the revocations.
	Items []Revocation
}
