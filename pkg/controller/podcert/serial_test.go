package podcert

import (
	"crypto/x509"
	"math/big"
	"testing"
)

// The Issued message keeps a serial's leading zero, as openssl prints it.
func TestIssuedMessageSerialKeepsItsLeadingZero(t *testing.T) {
	serial, _ := new(big.Int).SetString("0df83cfb0b4403c0646bbb86c295bb24", 16)
	got := issuedMessage("example.com/pods", &x509.Certificate{SerialNumber: serial})
	if want := "Issued by signer example.com/pods, serial 0df83cfb0b4403c0646bbb86c295bb24"; got != want {
		t.Errorf("Issued message %q, want %q", got, want)
	}
}
