package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:nonNamespaced
// +genclient:onlyVerbs=create,get,list,watch
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
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// spec names the certificate and why it is revoked. Immutable.
	Spec RevocationSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`

	// status is what the server found: the certificate's identity, signer,
	// CA and request, and who revoked it when. Set at create, never changed.
	// +optional
	Status RevocationStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// RevocationSpec names the certificate to revoke: exactly one of
// certificateSHA256 and serialNumber.
type RevocationSpec struct {
	// certificateSHA256 is the SHA-256 of the certificate's DER in hex (what
	// kube-apiserver's audit log shows as credential-id X509SHA256=<hex>).
	// +optional
	CertificateSHA256 string `json:"certificateSHA256,omitempty" protobuf:"bytes,1,opt,name=certificateSHA256"`

	// serialNumber is the certificate's serial number in hex.
	// +optional
	SerialNumber string `json:"serialNumber,omitempty" protobuf:"bytes,2,opt,name=serialNumber"`

	// caName, with serialNumber, is the CertificateAuthority that issued the
	// certificate. Optional: serial numbers are random and rekey looks in
	// every CA when it is empty, refusing a serial that two CAs issued.
	// +optional
	CAName string `json:"caName,omitempty" protobuf:"bytes,3,opt,name=caName"`

	// reason is the RFC 5280 reason: Unspecified (the default),
	// KeyCompromise, CACompromise, AffiliationChanged, Superseded,
	// CessationOfOperation, PrivilegeWithdrawn or AACompromise.
	// +optional
	Reason RevocationReason `json:"reason,omitempty" protobuf:"bytes,4,opt,name=reason,casttype=RevocationReason"`
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
	CertificateSHA256 string `json:"certificateSHA256" protobuf:"bytes,1,opt,name=certificateSHA256"`

	// serialNumber is the certificate's serial number in hex.
	SerialNumber string `json:"serialNumber" protobuf:"bytes,2,opt,name=serialNumber"`

	// signerName is the signer that issued the certificate.
	SignerName string `json:"signerName" protobuf:"bytes,3,opt,name=signerName"`

	// caName is the CertificateAuthority whose key signed the certificate.
	CAName string `json:"caName" protobuf:"bytes,4,opt,name=caName"`

	// caKeyID identifies that key (its revocations end with it).
	CAKeyID string `json:"caKeyID" protobuf:"bytes,5,opt,name=caKeyID"`

	// subject is the certificate's subject (RFC 2253).
	// +optional
	Subject string `json:"subject,omitempty" protobuf:"bytes,6,opt,name=subject"`

	// requester is the user that requested the certificate.
	// +optional
	Requester string `json:"requester,omitempty" protobuf:"bytes,7,opt,name=requester"`

	// request is the request the certificate was issued for: a rekey
	// CertificateSigningRequest's name, "certificates.k8s.io:<name>" for
	// the host cluster's CertificateSigningRequests, or
	// "pcr:<namespace>/<name>" for its PodCertificateRequests.
	// +optional
	Request string `json:"request,omitempty" protobuf:"bytes,8,opt,name=request"`

	// requestUID is that request's UID.
	// +optional
	RequestUID string `json:"requestUID,omitempty" protobuf:"bytes,9,opt,name=requestUID"`

	// notAfter is when the certificate expires; rekey deletes the
	// revocation some time after.
	NotAfter metav1.Time `json:"notAfter" protobuf:"bytes,10,opt,name=notAfter"`

	// revocationTime is when the server accepted the revocation.
	RevocationTime metav1.Time `json:"revocationTime" protobuf:"bytes,11,opt,name=revocationTime"`

	// revokedBy is the user that revoked it.
	RevokedBy string `json:"revokedBy" protobuf:"bytes,12,opt,name=revokedBy"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RevocationList is a list of Revocations.
type RevocationList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// items are the revocations.
	Items []Revocation `json:"items" protobuf:"bytes,2,rep,name=items"`
}
