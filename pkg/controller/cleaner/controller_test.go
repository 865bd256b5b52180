package cleaner

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/pki"
)

func TestDue(t *testing.T) {
	// Relative to the real clock: the expired-certificate case uses a CA
	// certificate made now.
	now := time.Now()
	created := func(ago time.Duration) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: "x", CreationTimestamp: metav1.NewTime(now.Add(-ago))}
	}
	cond := func(typ certv1alpha1.RequestConditionType, ago time.Duration) []certv1alpha1.CertificateSigningRequestCondition {
		return []certv1alpha1.CertificateSigningRequestCondition{{Type: typ, Status: "True", LastUpdateTime: metav1.NewTime(now.Add(-ago))}}
	}
	ca, err := pki.NewCA("expired", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		csr certv1alpha1.CertificateSigningRequest
		// at is when Due is asked; zero means now.
		at   time.Time
		want bool
	}{
		"pending 23h":      {csr: certv1alpha1.CertificateSigningRequest{ObjectMeta: created(23 * time.Hour)}},
		"pending 25h":      {csr: certv1alpha1.CertificateSigningRequest{ObjectMeta: created(25 * time.Hour)}, want: true},
		"approved 59m ago": {csr: certv1alpha1.CertificateSigningRequest{ObjectMeta: created(2 * time.Hour), Status: certv1alpha1.CertificateSigningRequestStatus{Conditions: cond("Approved", 59*time.Minute)}}},
		"approved 61m ago": {csr: certv1alpha1.CertificateSigningRequest{ObjectMeta: created(2 * time.Hour), Status: certv1alpha1.CertificateSigningRequestStatus{Conditions: cond("Approved", 61*time.Minute)}}, want: true},
		"denied 61m ago":   {csr: certv1alpha1.CertificateSigningRequest{ObjectMeta: created(2 * time.Hour), Status: certv1alpha1.CertificateSigningRequestStatus{Conditions: cond("Denied", 61*time.Minute)}}, want: true},
		"failed 61m ago":   {csr: certv1alpha1.CertificateSigningRequest{ObjectMeta: created(2 * time.Hour), Status: certv1alpha1.CertificateSigningRequestStatus{Conditions: cond("Failed", 61*time.Minute)}}, want: true},
		// The CA certificate above is valid for an hour from now.
		"certificate valid":   {csr: certv1alpha1.CertificateSigningRequest{ObjectMeta: created(time.Minute), Status: certv1alpha1.CertificateSigningRequestStatus{Certificate: ca.CertPEM()}}},
		"certificate expired": {csr: certv1alpha1.CertificateSigningRequest{ObjectMeta: created(time.Minute), Status: certv1alpha1.CertificateSigningRequestStatus{Certificate: ca.CertPEM()}}, at: now.Add(2 * time.Hour), want: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			at := tc.at
			if at.IsZero() {
				at = now
			}
			if _, got := Due(&tc.csr, at); got != tc.want {
				t.Fatalf("Due = %v, want %v", got, tc.want)
			}
		})
	}
}
