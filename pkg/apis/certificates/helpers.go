package certificates

// HasCondition reports whether a condition of the given type is present.
// Approved, Denied and Failed only ever have status True, so presence is
// what matters (seed 003).
func HasCondition(status CertificateSigningRequestStatus, t RequestConditionType) bool {
	for _, c := range status.Conditions {
		if c.Type == t {
			return true
		}
	}
	return false
}

// IsApproved reports whether the request carries an Approved condition.
func IsApproved(csr *CertificateSigningRequest) bool {
	return HasCondition(csr.Status, CertificateApproved)
}

// IsDenied reports whether the request carries a Denied condition.
func IsDenied(csr *CertificateSigningRequest) bool {
	return HasCondition(csr.Status, CertificateDenied)
}
