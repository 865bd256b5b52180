package crl

import (
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"math/big"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/pki"
)

// BenchmarkIssue100k makes and signs (ECDSA P-256, rekey's CA key) the CRL
// of one CA key with 100,000 revoked certificates: 127-bit random serials
// as rekey issues, every fourth revocation with a reason code. It reports
// the CRL's size (bytes/crl). What one issue costs is from the cached
// Revocations (Revoked) to the signed DER, as Manager.issue does it; the
// crypto-x509 sub-benchmark makes the same CRL with
// x509.CreateRevocationList, for the ratio in one run.
func BenchmarkIssue100k(b *testing.B) {
	const n = 100_000
	ca, err := pki.NewCA("bench", 24*time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	objs := make([]any, n)
	limit := new(big.Int).Lsh(big.NewInt(1), 127)
	reasons := []certv1alpha1.RevocationReason{"", "KeyCompromise", "Superseded", "CessationOfOperation"}
	for i := range objs {
		serial, err := rand.Int(rand.Reader, limit)
		if err != nil {
			b.Fatal(err)
		}
		objs[i] = &certv1alpha1.Revocation{
			Spec: certv1alpha1.RevocationSpec{Reason: reasons[i%len(reasons)]},
			Status: certv1alpha1.RevocationStatus{
				SerialNumber: fmt.Sprintf("%x", serial), CAName: "bench", CAKeyID: "k",
				RevocationTime: metav1.NewTime(now.Add(-time.Duration(i) * time.Second)), NotAfter: metav1.NewTime(now.Add(time.Hour)),
			},
		}
	}
	// rekey's encoder (what Issue uses), and crypto/x509's for comparison.
	b.Run("rekey", func(b *testing.B) {
		var size int
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			crl, err := Issue(Revoked(objs, now), ca.Cert, ca.Key, big.NewInt(int64(i)+1), now, DefaultValidity)
			if err != nil {
				b.Fatal(err)
			}
			if crl.Entries != n {
				b.Fatalf("%d entries", crl.Entries)
			}
			size = len(crl.DER)
		}
		b.ReportMetric(float64(size), "bytes/crl")
		b.ReportMetric(float64(size)/n, "bytes/entry")
	})
	b.Run("crypto-x509", func(b *testing.B) {
		var size int
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
				RevokedCertificateEntries: Revoked(objs, now), Number: big.NewInt(int64(i) + 1), ThisUpdate: now.Add(-Backdate), NextUpdate: now.Add(DefaultValidity),
			}, ca.Cert, ca.Key)
			if err != nil {
				b.Fatal(err)
			}
			size = len(der)
		}
		b.ReportMetric(float64(size), "bytes/crl")
	})
}
