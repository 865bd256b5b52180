package crl

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"math/big"
	"testing"
	"time"

	"rekey.io/rekey/pkg/signing"
)

type keyedCA struct {
	name string
	cert *x509.Certificate
	key  crypto.Signer
}

func testCAs(t *testing.T) []keyedCA {
	t.Helper()
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p521, _ := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	var out []keyedCA
	for name, key := range map[string]crypto.Signer{"P-256": p256, "P-384": p384, "P-521": p521, "Ed25519": ed} {
		cert, err := signing.NewSelfSignedCA("crl test "+name, key, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, keyedCA{name, cert, key})
	}
	return out
}

// sameAsCryptoX509 makes the CRL both ways and requires the same
// to-be-signed bytes and a signature that verifies against the CA (the
// whole CRL for Ed25519, whose signatures are not randomized).
func sameAsCryptoX509(t *testing.T, ca keyedCA, template *x509.RevocationList) {
	t.Helper()
	want, err := x509.CreateRevocationList(rand.Reader, template, ca.cert, ca.key)
	if err != nil {
		t.Fatalf("crypto/x509: %v", err)
	}
	got, err := createRevocationList(template, ca.cert, ca.key)
	if err != nil {
		t.Fatalf("createRevocationList: %v", err)
	}
	wantRL, err := x509.ParseRevocationList(want)
	if err != nil {
		t.Fatal(err)
	}
	gotRL, err := x509.ParseRevocationList(got)
	if err != nil {
		t.Fatalf("createRevocationList made what does not parse: %v", err)
	}
	if !bytes.Equal(gotRL.RawTBSRevocationList, wantRL.RawTBSRevocationList) {
		t.Fatalf("to-be-signed CRL differs from crypto/x509's\n got: %x\nwant: %x", gotRL.RawTBSRevocationList, wantRL.RawTBSRevocationList)
	}
	if err := gotRL.CheckSignatureFrom(ca.cert); err != nil {
		t.Fatalf("signature does not verify: %v", err)
	}
	if ca.name == "Ed25519" && !bytes.Equal(got, want) {
		t.Fatal("Ed25519 CRL differs from crypto/x509's")
	}
}

func TestCreateRevocationListMatchesCryptoX509(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 123456789, time.FixedZone("x", 3600))
	big127 := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 127), big.NewInt(1))
	top := new(big.Int).Lsh(big.NewInt(1), 127) // first byte 0x80: a leading zero
	many := make([]x509.RevocationListEntry, 300)
	for i := range many {
		many[i] = x509.RevocationListEntry{SerialNumber: big.NewInt(int64(i) * 7919), RevocationTime: now.Add(-time.Duration(i) * time.Minute), ReasonCode: i % 11}
	}
	variants := map[string]*x509.RevocationList{
		"no entries": {Number: big.NewInt(1), ThisUpdate: now, NextUpdate: now.Add(time.Hour)},
		"entries of every reason": {Number: big.NewInt(now.UnixMilli()), ThisUpdate: now, NextUpdate: now.Add(24 * time.Hour),
			RevokedCertificateEntries: func() []x509.RevocationListEntry {
				var es []x509.RevocationListEntry
				for _, code := range []int{0, 1, 2, 3, 4, 5, 9, 10} {
					es = append(es, x509.RevocationListEntry{SerialNumber: big.NewInt(int64(100 + code)), RevocationTime: now, ReasonCode: code})
				}
				return es
			}()},
		"serials of every size": {Number: big.NewInt(2), ThisUpdate: now, NextUpdate: now.Add(time.Hour), RevokedCertificateEntries: []x509.RevocationListEntry{
			{SerialNumber: big.NewInt(0), RevocationTime: now}, {SerialNumber: big.NewInt(0x7f), RevocationTime: now}, {SerialNumber: big.NewInt(0x80), RevocationTime: now, ReasonCode: 1},
			{SerialNumber: big127, RevocationTime: now, ReasonCode: 4}, {SerialNumber: top, RevocationTime: now},
		}},
		"lengths over 127 and 65535 bytes": {Number: big.NewInt(3), ThisUpdate: now, NextUpdate: now.Add(time.Hour), RevokedCertificateEntries: append(many, many...)},
		"CRL number of 20 bytes":           {Number: new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 159), big.NewInt(1)), ThisUpdate: now, NextUpdate: now.Add(time.Hour)},
		"times past 2049 (GeneralizedTime)": {Number: big.NewInt(4), ThisUpdate: now, NextUpdate: time.Date(2050, 1, 1, 0, 0, 0, 0, time.UTC),
			RevokedCertificateEntries: []x509.RevocationListEntry{{SerialNumber: big.NewInt(5), RevocationTime: time.Date(2051, 3, 4, 5, 6, 7, 0, time.UTC)}}},
		"last UTCTime second": {Number: big.NewInt(5), ThisUpdate: now, NextUpdate: time.Date(2049, 12, 31, 23, 59, 59, 0, time.UTC)},
	}
	for _, ca := range testCAs(t) {
		for name, template := range variants {
			t.Run(ca.name+"/"+name, func(t *testing.T) { sameAsCryptoX509(t, ca, template) })
		}
	}
}

func TestCreateRevocationListFallsBackToCryptoX509(t *testing.T) {
	now := time.Now()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaCert, err := signing.NewSelfSignedCA("rsa", rsaKey, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: now, NextUpdate: now.Add(time.Hour),
		RevokedCertificateEntries: []x509.RevocationListEntry{{SerialNumber: big.NewInt(9), RevocationTime: now, ReasonCode: 1}}}
	der, err := createRevocationList(template, rsaCert, rsaKey)
	if err != nil {
		t.Fatalf("RSA key: %v", err)
	}
	rl, err := x509.ParseRevocationList(der)
	if err != nil || rl.CheckSignatureFrom(rsaCert) != nil {
		t.Fatalf("RSA key's CRL: %v", err)
	}
	// What crypto/x509 refuses is refused.
	ca := testCAs(t)[0]
	noCRLSign := *ca.cert
	noCRLSign.KeyUsage = x509.KeyUsageCertSign
	if _, err := createRevocationList(template, &noCRLSign, ca.key); err == nil {
		t.Fatal("an issuer without cRLSign was accepted")
	}
	other := testCAs(t)[1]
	if _, err := createRevocationList(template, ca.cert, other.key); err == nil {
		t.Fatal("a key that is not the issuer's signed")
	}
	if _, err := createRevocationList(&x509.RevocationList{Number: big.NewInt(1), ThisUpdate: now, NextUpdate: now.Add(-time.Hour)}, ca.cert, ca.key); err == nil {
		t.Fatal("nextUpdate before thisUpdate was accepted")
	}
}
