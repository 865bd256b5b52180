package signing

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"io"
	"math/big"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

// testCA is a CA whose key createCertificate signs with in process.
type testCA struct {
	name string
	key  crypto.Signer
	cert *x509.Certificate
}

func testCAs(t testing.TB) []testCA {
	t.Helper()
	keys := map[string]func() (crypto.Signer, error){
		"ECDSA-P256": func() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) },
		"ECDSA-P384": func() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P384(), rand.Reader) },
		"ECDSA-P521": func() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P521(), rand.Reader) },
		"Ed25519": func() (crypto.Signer, error) {
			_, k, err := ed25519.GenerateKey(rand.Reader)
			return k, err
		},
	}
	var cas []testCA
	for name, gen := range keys {
		key, err := gen()
		if err != nil {
			t.Fatal(err)
		}
		cert, err := NewSelfSignedCA("test "+name, key, 24*time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		cas = append(cas, testCA{name, key, cert})
	}
	return cas
}

// leafTemplate is a template as Issue fills it, for a P-256 leaf key.
func leafTemplate(t testing.TB) (*x509.Certificate, crypto.PublicKey) {
	t.Helper()
	leaf, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	spki, err := x509.MarshalPKIXPublicKey(leaf.Public())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber:          big.NewInt(0x1234567890),
		Subject:               pkix.Name{CommonName: "system:node:worker-1", Organization: []string{"system:nodes"}},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		SubjectKeyId:          subjectKeyID(spki),
	}, leaf.Public()
}

// sameAsCryptoX509 makes the certificate both ways and requires the same
// to-be-signed bytes and signature algorithm, and a signature that
// verifies against the CA.
func sameAsCryptoX509(t *testing.T, ca testCA, template *x509.Certificate, pub crypto.PublicKey) {
	t.Helper()
	want, err := x509.CreateCertificate(rand.Reader, template, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatalf("crypto/x509: %v", err)
	}
	got, err := createCertificate(template, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatalf("createCertificate: %v", err)
	}
	wantCert, err := x509.ParseCertificate(want)
	if err != nil {
		t.Fatal(err)
	}
	gotCert, err := x509.ParseCertificate(got)
	if err != nil {
		t.Fatalf("createCertificate made what does not parse: %v", err)
	}
	if !bytes.Equal(gotCert.RawTBSCertificate, wantCert.RawTBSCertificate) {
		t.Fatalf("to-be-signed certificate differs from crypto/x509's\n got: %x\nwant: %x", gotCert.RawTBSCertificate, wantCert.RawTBSCertificate)
	}
	if gotCert.SignatureAlgorithm != wantCert.SignatureAlgorithm {
		t.Fatalf("signature algorithm %v, crypto/x509 chose %v", gotCert.SignatureAlgorithm, wantCert.SignatureAlgorithm)
	}
	if err := gotCert.CheckSignatureFrom(ca.cert); err != nil {
		t.Fatalf("signature does not verify against the CA: %v", err)
	}
	// The whole certificate differs from crypto/x509's only in the
	// signature (ECDSA signatures are randomized, Ed25519's are not).
	if ca.name == "Ed25519" && !bytes.Equal(got, want) {
		t.Fatalf("Ed25519 certificate differs from crypto/x509's")
	}
}

func TestCreateCertificateMatchesCryptoX509(t *testing.T) {
	mustURL := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	variants := map[string]func(*x509.Certificate){
		"as issued to a node": func(*x509.Certificate) {},
		"full subject": func(c *x509.Certificate) {
			c.Subject = pkix.Name{
				Country: []string{"DE", "FR"}, Organization: []string{"a", "b"}, OrganizationalUnit: []string{"ou"},
				Locality: []string{"Berlin"}, Province: []string{"BE"}, StreetAddress: []string{"x 1"}, PostalCode: []string{"10115"},
				SerialNumber: "42", CommonName: "full",
			}
		},
		"subject as parsed from a request (Names as ExtraNames)": func(c *x509.Certificate) {
			c.Subject = pkix.Name{ExtraNames: []pkix.AttributeTypeAndValue{
				{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: "cn"},
				{Type: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 1}, Value: "a@example.com"},
				{Type: asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 1}, Value: "uid"},
				{Type: asn1.ObjectIdentifier{2, 5, 4, 10}, Value: "org"},
			}}
		},
		"empty subject, names only (critical)": func(c *x509.Certificate) {
			c.Subject = pkix.Name{}
			c.DNSNames = []string{"only.example.com"}
		},
		"every kind of name": func(c *x509.Certificate) {
			c.DNSNames = []string{"a.example.com", "*.b.example.com"}
			c.EmailAddresses = []string{"ops@example.com"}
			c.IPAddresses = []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("2001:db8::1"), net.ParseIP("::ffff:192.0.2.7"), net.IPv4(1, 2, 3, 4).To4()}
			c.URIs = []*url.URL{mustURL("spiffe://cluster.local/ns/a/sa/b"), mustURL("https://example.com/x?y=z")}
		},
		"every key usage": func(c *x509.Certificate) {
			c.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageContentCommitment | x509.KeyUsageKeyEncipherment |
				x509.KeyUsageDataEncipherment | x509.KeyUsageKeyAgreement | x509.KeyUsageCertSign | x509.KeyUsageCRLSign |
				x509.KeyUsageEncipherOnly | x509.KeyUsageDecipherOnly
		},
		"decipher only (second byte)": func(c *x509.Certificate) { c.KeyUsage = x509.KeyUsageDecipherOnly },
		"no key usage":                func(c *x509.Certificate) { c.KeyUsage = 0 },
		"one CRL distribution point": func(c *x509.Certificate) {
			c.CRLDistributionPoints = []string{"https://rekey.example.com/crl/ca/key-1"}
		},
		"CRL distribution points after every kind of name": func(c *x509.Certificate) {
			c.Subject = pkix.Name{}
			c.DNSNames = []string{"a.example.com"}
			c.URIs = []*url.URL{mustURL("spiffe://cluster.local/ns/a/sa/b")}
			c.CRLDistributionPoints = []string{"http://crl.example.com/a.crl", "https://rekey.example.com:8443/crl/ca", "http://x/", "http://y/4"}
		},
		"no extended key usage": func(c *x509.Certificate) { c.ExtKeyUsage = nil },
		"no subject key ID":     func(c *x509.Certificate) { c.SubjectKeyId = nil },
		"serial zero":           func(c *x509.Certificate) { c.SerialNumber = big.NewInt(0) },
		"serial of 127 bits": func(c *x509.Certificate) {
			c.SerialNumber = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 127), big.NewInt(1))
		},
		"valid into 2050 (GeneralizedTime)": func(c *x509.Certificate) {
			c.NotAfter = time.Date(2050, 1, 1, 0, 0, 0, 0, time.UTC)
		},
		"last UTCTime second": func(c *x509.Certificate) {
			c.NotAfter = time.Date(2049, 12, 31, 23, 59, 59, 0, time.UTC)
		},
		"times in another zone": func(c *x509.Certificate) {
			zone := time.FixedZone("x", 5*3600+1800)
			c.NotBefore, c.NotAfter = c.NotBefore.In(zone), c.NotAfter.In(zone)
		},
	}
	for eku := range extKeyUsageOIDs {
		variants["extended key usage "+big.NewInt(int64(eku)).String()] = func(c *x509.Certificate) {
			c.ExtKeyUsage = []x509.ExtKeyUsage{eku, x509.ExtKeyUsageServerAuth}
		}
	}
	for _, ca := range testCAs(t) {
		for name, change := range variants {
			t.Run(ca.name+"/"+name, func(t *testing.T) {
				template, pub := leafTemplate(t)
				change(template)
				sameAsCryptoX509(t, ca, template, pub)
			})
		}
		t.Run(ca.name+"/leaf key of another algorithm", func(t *testing.T) {
			template, _ := leafTemplate(t)
			pub, _, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			sameAsCryptoX509(t, ca, template, pub)
		})
		t.Run(ca.name+"/CA without a subject key ID", func(t *testing.T) {
			noSKID := ca
			cert := *ca.cert
			cert.SubjectKeyId = nil
			noSKID.cert = &cert
			template, pub := leafTemplate(t)
			sameAsCryptoX509(t, noSKID, template, pub)
		})
	}
}

// countingSigner passes signing to an in-process key but is not one, as a
// PKCS#11 handle is not; corrupt makes it return a wrong signature.
type countingSigner struct {
	crypto.Signer
	corrupt bool
	calls   int
}

func (s *countingSigner) Sign(r io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	s.calls++
	sig, err := s.Signer.Sign(r, digest, opts)
	if s.corrupt && err == nil {
		sig = append([]byte(nil), sig...)
		sig[len(sig)-1] ^= 1
	}
	return sig, err
}

func TestCreateCertificateChecksOtherSigners(t *testing.T) {
	for _, ca := range testCAs(t) {
		t.Run(ca.name, func(t *testing.T) {
			template, pub := leafTemplate(t)
			good := &countingSigner{Signer: ca.key}
			der, err := createCertificate(template, ca.cert, pub, good)
			if err != nil || good.calls != 1 {
				t.Fatalf("signer not in process: err %v, %d signatures", err, good.calls)
			}
			if _, err := x509.ParseCertificate(der); err != nil {
				t.Fatal(err)
			}
			bad := &countingSigner{Signer: ca.key, corrupt: true}
			if _, err := createCertificate(template, ca.cert, pub, bad); err == nil || !strings.Contains(err.Error(), "signature returned by signer is invalid") {
				t.Fatalf("a signer that is not a Go key returned a wrong signature and createCertificate did not check it: %v", err)
			}
		})
	}
}

func TestCreateCertificateFallsBackForWhatItDoesNotEncode(t *testing.T) {
	ca := testCAs(t)[0]
	for name, change := range map[string]func(*x509.Certificate){
		"unknown extended key usage": func(c *x509.Certificate) { c.UnknownExtKeyUsage = []asn1.ObjectIdentifier{{1, 2, 3, 4}} },
		"extra extension": func(c *x509.Certificate) {
			c.ExtraExtensions = []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 2, 3, 5}, Value: []byte{5, 0}}}
		},
		"raw subject": func(c *x509.Certificate) {
			raw, _ := asn1.Marshal(pkix.Name{CommonName: "raw"}.ToRDNSequence())
			c.RawSubject = raw
		},
		"OCSP server":   func(c *x509.Certificate) { c.OCSPServer = []string{"http://ocsp.example.com"} },
		"name excluded": func(c *x509.Certificate) { c.ExcludedDNSDomains = []string{"example.com"} },
	} {
		t.Run(name, func(t *testing.T) {
			template, pub := leafTemplate(t)
			change(template)
			if encodable(template) {
				t.Fatal("encodable, but encodeTBS does not encode it")
			}
			sameAsCryptoX509(t, ca, template, pub)
		})
	}
}

func TestCreateCertificateRefusesWhatCryptoX509Refuses(t *testing.T) {
	cas := testCAs(t)
	ca, other := cas[0], cas[1]
	for name, tc := range map[string]struct {
		change func(*x509.Certificate)
		key    crypto.Signer
	}{
		"a key that is not the CA's": {func(*x509.Certificate) {}, other.key},
		"non-ASCII DNS name":         {func(c *x509.Certificate) { c.DNSNames = []string{"bücher.example"} }, ca.key},
		"non-ASCII email":            {func(c *x509.Certificate) { c.EmailAddresses = []string{"ü@example.com"} }, ca.key},
	} {
		t.Run(name, func(t *testing.T) {
			template, pub := leafTemplate(t)
			tc.change(template)
			if _, err := x509.CreateCertificate(rand.Reader, template, ca.cert, pub, tc.key); err == nil {
				t.Fatal("crypto/x509 accepts it: the case tests nothing")
			}
			if der, err := createCertificate(template, ca.cert, pub, tc.key); err == nil {
				t.Fatalf("createCertificate made a certificate (%d bytes)", len(der))
			}
		})
	}
}

// FuzzCreateCertificate: for any subject, names, key usage and validity,
// createCertificate encodes what crypto/x509 encodes, or refuses what it
// refuses.
func FuzzCreateCertificate(f *testing.F) {
	f.Add("system:node:a", "system:nodes", "a.example.com", "a@example.com", []byte{10, 0, 0, 1}, "spiffe://x/y", uint16(x509.KeyUsageDigitalSignature), int64(86400))
	f.Add("", "", "only.example", "", []byte(nil), "", uint16(0), int64(1))
	f.Add("ü", "o\x00", "bücher", "\xff", []byte(net.ParseIP("2001:db8::1")), "https://h/p?q", uint16(0x1ff), int64(1<<40))
	ca := testCAs(f)[0]
	f.Fuzz(func(t *testing.T, cn, org, dns, email string, ip []byte, uri string, ku uint16, seconds int64) {
		template, pub := leafTemplate(t)
		template.Subject = pkix.Name{CommonName: cn}
		if org != "" {
			template.Subject.Organization = []string{org}
		}
		if dns != "" {
			template.DNSNames = []string{dns}
		}
		if email != "" {
			template.EmailAddresses = []string{email}
		}
		if len(ip) == net.IPv4len || len(ip) == net.IPv6len {
			template.IPAddresses = []net.IP{ip}
		}
		if u, err := url.Parse(uri); err == nil && uri != "" {
			template.URIs = []*url.URL{u}
		}
		template.KeyUsage = x509.KeyUsage(ku & 0x1ff)
		if seconds > 0 && seconds < 1<<41 {
			template.NotAfter = template.NotBefore.Add(time.Duration(seconds) * time.Second)
		}
		want, wantErr := x509.CreateCertificate(rand.Reader, template, ca.cert, pub, ca.key)
		got, gotErr := createCertificate(template, ca.cert, pub, ca.key)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("crypto/x509: %v; createCertificate: %v", wantErr, gotErr)
		}
		if wantErr != nil {
			return
		}
		wantCert, err := x509.ParseCertificate(want)
		if err != nil {
			// crypto/x509 makes certificates it cannot parse (a name it
			// rejects when reading); ours must be the same bytes anyway.
			wantTBS, gotTBS := tbsOf(t, want), tbsOf(t, got)
			if !bytes.Equal(wantTBS, gotTBS) {
				t.Fatalf("to-be-signed certificate differs from crypto/x509's")
			}
			return
		}
		gotCert, err := x509.ParseCertificate(got)
		if err != nil {
			t.Fatalf("crypto/x509's parses, ours does not: %v", err)
		}
		if !bytes.Equal(gotCert.RawTBSCertificate, wantCert.RawTBSCertificate) {
			t.Fatalf("to-be-signed certificate differs from crypto/x509's")
		}
		if err := gotCert.CheckSignatureFrom(ca.cert); err != nil {
			t.Fatal(err)
		}
	})
}

// tbsOf returns the first element of a certificate's outer SEQUENCE.
func tbsOf(t *testing.T, der []byte) []byte {
	var outer struct {
		TBS asn1.RawValue
		Alg pkix.AlgorithmIdentifier
		Sig asn1.BitString
	}
	if _, err := asn1.Unmarshal(der, &outer); err != nil {
		t.Fatal(err)
	}
	return outer.TBS.FullBytes
}

// TestKeysOfTheStoresSignInProcess: the keys the key stores hand out for
// ECDSA and Ed25519 (generated, or parsed from PKCS#8 as the etcd and
// File stores parse them) take the path without the second check; RSA
// keys do not.
func TestKeysOfTheStoresSignInProcess(t *testing.T) {
	for alg, inProcess := range map[Algorithm]bool{ECDSAP256: true, ECDSAP384: true, Ed25519: true, RSA2048: false} {
		key, err := GenerateKey(alg)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := x509.ParsePKCS8PrivateKey(der)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []crypto.Signer{key, parsed.(crypto.Signer)} {
			if _, _, ok := inProcessSigner(k); ok != inProcess {
				t.Errorf("%s key %T: signs in process %v, want %v", alg, k, ok, inProcess)
			}
		}
	}
}
