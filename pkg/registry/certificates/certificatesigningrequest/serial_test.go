package certificatesigningrequest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A serial whose first byte is below 0x10 keeps its leading zero in the
// Issued condition and the SERIAL column, as openssl prints it: the
// finding was "df83cfb0b4403c0646bbb86c295bb24", 31 hex digits.
func TestSerialKeepsItsLeadingZero(t *testing.T) {
	serial, _ := new(big.Int).SetString("0df83cfb0b4403c0646bbb86c295bb24", 16)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})

	const want = "0df83cfb0b4403c0646bbb86c295bb24"
	if got := serialHex(firstCertificate(certPEM)); got != want {
		t.Errorf("SERIAL column: %q, want %q", got, want)
	}
	if msg := issuedCondition(certPEM, metav1.Now()).Message; !strings.Contains(msg, "serial "+want+",") {
		t.Errorf("Issued message %q does not say serial %s", msg, want)
	}
}
