package v1alpha1

// Condition helpers for versioned CertificateSigningRequests. They live beside
// the types so that every layer that reads a request (controllers, the agent,
// tests) asks the same question the same way without importing a controller
// package. Approved, Denied and Failed only ever have status True, so their
// presence is what matters.

// GetCondition returns the condition of type t, or nil.
func GetCondition(csr *CertificateSigningRequest, t RequestConditionType) *CertificateSigningRequestCondition {
	for i := range csr.Status.Conditions {
		if csr.Status.Conditions[i].Type == t {
			return &csr.Status.Conditions[i]
		}
	}
	return nil
}

// IsApproved reports an Approved condition.
func IsApproved(csr *CertificateSigningRequest) bool {
	return GetCondition(csr, CertificateApproved) != nil
}

// IsDenied reports a Denied condition.
func IsDenied(csr *CertificateSigningRequest) bool {
	return GetCondition(csr, CertificateDenied) != nil
}

// IsFailed reports a Failed condition.
func IsFailed(csr *CertificateSigningRequest) bool {
	return GetCondition(csr, CertificateFailed) != nil
}

// IsPending reports a request that is neither approved nor denied.
func IsPending(csr *CertificateSigningRequest) bool {
	return !IsApproved(csr) && !IsDenied(csr)
}

// NeedsSigning reports an approved request with no certificate and no failure.
func NeedsSigning(csr *CertificateSigningRequest) bool {
	return IsApproved(csr) && !IsDenied(csr) && !IsFailed(csr) && len(csr.Status.Certificate) == 0
}
