package v1alpha1

import "testing"

func TestConditionHelpers(t *testing.T) {
	with := func(cert bool, types ...RequestConditionType) *CertificateSigningRequest {
		csr := &CertificateSigningRequest{}
		for _, ty := range types {
			csr.Status.Conditions = append(csr.Status.Conditions, CertificateSigningRequestCondition{Type: ty, Status: "True"})
		}
		if cert {
			csr.Status.Certificate = []byte("c")
		}
		return csr
	}
	tests := map[string]struct {
		csr                  *CertificateSigningRequest
		pending, needsSigned bool
	}{
		"new":               {csr: with(false), pending: true},
		"approved":          {csr: with(false, CertificateApproved), needsSigned: true},
		"approved, issued":  {csr: with(true, CertificateApproved)},
		"approved, failed":  {csr: with(false, CertificateApproved, CertificateFailed)},
		"denied":            {csr: with(false, CertificateDenied)},
		"failed, undecided": {csr: with(false, CertificateFailed), pending: true},
	}
	for name, tc := range tests {
		if got := IsPending(tc.csr); got != tc.pending {
			t.Errorf("%s: IsPending = %v", name, got)
		}
		if got := NeedsSigning(tc.csr); got != tc.needsSigned {
			t.Errorf("%s: NeedsSigning = %v", name, got)
		}
	}
	if GetCondition(with(false, CertificateDenied), CertificateApproved) != nil {
		t.Error("GetCondition found a type that is not there")
	}
}
