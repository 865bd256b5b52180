package certificates

// GetCondition returns the condition of the given type, or nil. Validation
// and the registry strategy share it. Approved, Denied and Failed only ever
// have status True, so presence is what matters for them (seed 003).
func GetCondition(csr *CertificateSigningRequest, t RequestConditionType) *CertificateSigningRequestCondition {
	for i := range csr.Status.Conditions {
		if csr.Status.Conditions[i].Type == t {
			return &csr.Status.Conditions[i]
		}
	}
	return nil
}

// IsApproved reports whether the request carries an Approved condition.
func IsApproved(csr *CertificateSigningRequest) bool {
	return GetCondition(csr, CertificateApproved) != nil
}

// IsDenied reports whether the request carries a Denied condition.
func IsDenied(csr *CertificateSigningRequest) bool {
	return GetCondition(csr, CertificateDenied) != nil
}

// IsFailed reports whether the request carries a Failed condition.
func IsFailed(csr *CertificateSigningRequest) bool {
	return GetCondition(csr, CertificateFailed) != nil
}
