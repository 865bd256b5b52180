package validation

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/apis/certificates"
)

const testSHA = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

func TestValidateRevocation(t *testing.T) {
	tests := map[string]struct {
		name    string
		spec    certificates.RevocationSpec
		wantErr string // a substring of the errors; "" is valid
	}{
		"by sha256":               {spec: certificates.RevocationSpec{CertificateSHA256: testSHA, Reason: "KeyCompromise"}},
		"by sha256, upper case":   {spec: certificates.RevocationSpec{CertificateSHA256: strings.ToUpper(testSHA), Reason: "Unspecified"}},
		"by serial":               {spec: certificates.RevocationSpec{SerialNumber: "1f", Reason: "Superseded"}},
		"by odd serial with a CA": {spec: certificates.RevocationSpec{SerialNumber: "abc", CAName: "team-ca", Reason: "AACompromise"}},
		"named by its sha":        {name: testSHA, spec: certificates.RevocationSpec{CertificateSHA256: testSHA, Reason: "Unspecified"}},
		"neither":                 {spec: certificates.RevocationSpec{Reason: "Unspecified"}, wantErr: "spec: Required value: exactly one of certificateSHA256 and serialNumber"},
		"both":                    {spec: certificates.RevocationSpec{CertificateSHA256: testSHA, SerialNumber: "1", Reason: "Unspecified"}, wantErr: "spec.serialNumber: Forbidden"},
		"short sha":               {spec: certificates.RevocationSpec{CertificateSHA256: testSHA[:62], Reason: "Unspecified"}, wantErr: "spec.certificateSHA256: Invalid value"},
		"sha not hex":             {spec: certificates.RevocationSpec{CertificateSHA256: "zz" + testSHA[2:], Reason: "Unspecified"}, wantErr: "spec.certificateSHA256: Invalid value"},
		"serial not hex":          {spec: certificates.RevocationSpec{SerialNumber: "12g", Reason: "Unspecified"}, wantErr: "spec.serialNumber: Invalid value"},
		"serial too long":         {spec: certificates.RevocationSpec{SerialNumber: strings.Repeat("a", 41), Reason: "Unspecified"}, wantErr: "spec.serialNumber: Too long"},
		"caName with sha":         {spec: certificates.RevocationSpec{CertificateSHA256: testSHA, CAName: "team-ca", Reason: "Unspecified"}, wantErr: "spec.caName: Forbidden: may only be set with serialNumber"},
		"caName not a name":       {spec: certificates.RevocationSpec{SerialNumber: "1", CAName: "../x", Reason: "Unspecified"}, wantErr: "spec.caName: Invalid value"},
		"unknown reason":          {spec: certificates.RevocationSpec{CertificateSHA256: testSHA, Reason: "CertificateHold"}, wantErr: `spec.reason: Unsupported value: "CertificateHold"`},
		"no reason":               {spec: certificates.RevocationSpec{CertificateSHA256: testSHA}, wantErr: "spec.reason: Unsupported value"},
		"name not a sha":          {name: "my-revocation", spec: certificates.RevocationSpec{CertificateSHA256: testSHA, Reason: "Unspecified"}, wantErr: "metadata.name: Invalid value"},
		"name in upper case":      {name: strings.ToUpper(testSHA), spec: certificates.RevocationSpec{CertificateSHA256: testSHA, Reason: "Unspecified"}, wantErr: "metadata.name: Invalid value"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := &certificates.Revocation{ObjectMeta: metav1.ObjectMeta{Name: tc.name}, Spec: tc.spec}
			if r.Name == "" {
				r.Name = testSHA // as the server names it
			}
			errs := ValidateRevocation(r)
			if tc.wantErr == "" {
				if len(errs) > 0 {
					t.Fatalf("unexpected errors: %v", errs)
				}
				return
			}
			if !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
				t.Fatalf("errors %v, want one with %q", errs, tc.wantErr)
			}
		})
	}
}

func TestValidateRevocationUpdate(t *testing.T) {
	old := &certificates.Revocation{
		ObjectMeta: metav1.ObjectMeta{Name: testSHA, ResourceVersion: "1"},
		Spec:       certificates.RevocationSpec{CertificateSHA256: testSHA, Reason: "Unspecified"},
		Status:     certificates.RevocationStatus{CertificateSHA256: testSHA, SignerName: "example.com/a", RevokedBy: "alice"},
	}
	labelled := old.DeepCopy()
	labelled.Labels = map[string]string{"ticket": "42"}
	if errs := ValidateRevocationUpdate(labelled, old); len(errs) > 0 {
		t.Fatalf("a label change was refused: %v", errs)
	}
	reason := old.DeepCopy()
	reason.Spec.Reason = "KeyCompromise"
	if errs := ValidateRevocationUpdate(reason, old); !strings.Contains(errs.ToAggregate().Error(), "spec.reason: Invalid value") {
		t.Fatalf("a spec change: %v", errs)
	}
	by := old.DeepCopy()
	by.Status.RevokedBy = "mallory"
	if errs := ValidateRevocationUpdate(by, old); !strings.Contains(errs.ToAggregate().Error(), "status: Forbidden") {
		t.Fatalf("a status change: %v", errs)
	}
}
