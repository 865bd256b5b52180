package hostcsr

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
)

// The Issued message keeps a serial's leading zero, as openssl prints it
// and the rekey request's Issued condition does.
func TestIssuedMessageSerialKeepsItsLeadingZero(t *testing.T) {
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
	msg := issuedMessage(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	if !strings.Contains(msg, "serial 0df83cfb0b4403c0646bbb86c295bb24,") {
		t.Errorf("Issued message %q lacks the serial with its leading zero", msg)
	}
}
