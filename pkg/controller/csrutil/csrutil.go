// Package csrutil answers common questions about versioned
// CertificateSigningRequests for rekey's controllers.
package csrutil

import (
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
)

// Condition returns the condition of type t, or nil.
func Condition(csr *certv1alpha1.CertificateSigningRequest, t certv1alpha1.RequestConditionType) *certv1alpha1.CertificateSigningRequestCondition {
	for i := range csr.Status.Conditions {
		if csr.Status.Conditions[i].Type == t {
			return &csr.Status.Conditions[i]
		}
	}
	return nil
}

// IsApproved reports an Approved condition.
func IsApproved(csr *certv1alpha1.CertificateSigningRequest) bool {
	return Condition(csr, certv1alpha1.CertificateApproved) != nil
}

// IsDenied reports a Denied condition.
func IsDenied(csr *certv1alpha1.CertificateSigningRequest) bool {
	return Condition(csr, certv1alpha1.CertificateDenied) != nil
}

// IsFailed reports a Failed condition.
func IsFailed(csr *certv1alpha1.CertificateSigningRequest) bool {
	return Condition(csr, certv1alpha1.CertificateFailed) != nil
}

// IsPending reports a request that is neither approved nor denied.
func IsPending(csr *certv1alpha1.CertificateSigningRequest) bool {
	return !IsApproved(csr) && !IsDenied(csr)
}

// NeedsSigning reports an approved request with no certificate and no failure.
func NeedsSigning(csr *certv1alpha1.CertificateSigningRequest) bool {
	return IsApproved(csr) && !IsDenied(csr) && !IsFailed(csr) && len(csr.Status.Certificate) == 0
}
