package certificates

import "testing"

func TestHelpers(t *testing.T) {
	csr := &CertificateSigningRequest{Status: CertificateSigningRequestStatus{Conditions: []CertificateSigningRequestCondition{{Type: CertificateApproved, Status: "True"}}}}
	if !IsApproved(csr) || IsDenied(csr) || GetCondition(csr, CertificateApproved) == nil || IsFailed(csr) || GetCondition(csr, CertificateFailed) != nil {
		t.Fatal("condition helpers disagree with the conditions")
	}
	if Resource("signers").String() != "signers.certificates.rekey.io" || Kind("Signer").String() != "Signer.certificates.rekey.io" {
		t.Fatalf("%s %s", Resource("signers"), Kind("Signer"))
	}
}
