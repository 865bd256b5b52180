package csrutil

import (
	"testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
)

func TestStates(t *testing.T) {
	with := func(cert bool, types ...certv1alpha1.RequestConditionType) *certv1alpha1.CertificateSigningRequest {
		csr := &certv1alpha1.CertificateSigningRequest{}
		for _, ty := range types {
			csr.Status.Conditions = append(csr.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{Type: ty, Status: "True"})
		}
		if cert {
			csr.Status.Certificate = []byte("c")
		}
		return csr
	}
	tests := map[string]struct {
		csr                  *certv1alpha1.CertificateSigningRequest
		pending, needsSigned bool
	}{
		"new":               {csr: with(false), pending: true},
		"approved":          {csr: with(false, certv1alpha1.CertificateApproved), needsSigned: true},
		"approved, issued":  {csr: with(true, certv1alpha1.CertificateApproved)},
		"approved, failed":  {csr: with(false, certv1alpha1.CertificateApproved, certv1alpha1.CertificateFailed)},
		"denied":            {csr: with(false, certv1alpha1.CertificateDenied)},
		"failed, undecided": {csr: with(false, certv1alpha1.CertificateFailed), pending: true},
	}
	for name, tc := range tests {
		if got := IsPending(tc.csr); got != tc.pending {
			t.Errorf("%s: IsPending = %v", name, got)
		}
		if got := NeedsSigning(tc.csr); got != tc.needsSigned {
			t.Errorf("%s: NeedsSigning = %v", name, got)
		}
	}
	if Condition(with(false, certv1alpha1.CertificateDenied), certv1alpha1.CertificateApproved) != nil {
		t.Error("Condition found a type that is not there")
	}
}
