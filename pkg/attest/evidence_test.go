package attest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/google/go-tpm/tpm2"
)

func csrDER(t *testing.T, providerID string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:n1", Organization: []string{"system:nodes"}}}
	if providerID != "" {
		v, _ := asn1.Marshal(providerID)
		tmpl.ExtraExtensions = []pkix.Extension{{Id: OIDProviderID, Value: v}}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestParseRequestRoundTrip(t *testing.T) {
	der := csrDER(t, "gce://p/z/n1")
	ev := &EvidenceV1{Version: EvidenceVersionV1, Secret: []byte("s"), Quote: []byte("q"), Signature: []byte("sig"), PCRBank: "sha256",
		PCRs: map[string][]byte{"7": bytes.Repeat([]byte{7}, 32)}}
	data, err := EncodeRequest(der, ev)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseRequest(data)
	if err != nil {
		t.Fatal(err)
	}
	if r.ProviderID != "gce://p/z/n1" || r.Provider != ProviderTPM || !bytes.Equal(r.Evidence.Quote, []byte("q")) {
		t.Fatalf("read back %+v %+v", r, r.Evidence)
	}
	pcrs, err := r.Evidence.PCRValues()
	if err != nil || len(pcrs[7]) != 32 {
		t.Fatalf("PCRs %v %v", pcrs, err)
	}

	plain, err := ParseRequest(pem.EncodeToMemory(&pem.Block{Type: BlockCertificateRequest, Bytes: der}))
	if err != nil || plain.Evidence != nil {
		t.Fatalf("a request without attestation: %v %+v", err, plain)
	}
}

func TestParseRequestRefuses(t *testing.T) {
	der := csrDER(t, "")
	block := func(typ string, b []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}) }
	ev := func(mutate func(*EvidenceV1)) []byte {
		e := EvidenceV1{Version: EvidenceVersionV1, PCRBank: "sha256"}
		if mutate != nil {
			mutate(&e)
		}
		b, _ := json.Marshal(e)
		return b
	}
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"evidence first":       {join(block(BlockProvider, []byte("tpm")), block(BlockCertificateRequest, der)), "must start with"},
		"data before provider": {join(block(BlockCertificateRequest, der), block(BlockData, ev(nil)), block(BlockProvider, []byte("tpm"))), "in that order"},
		"provider alone":       {join(block(BlockCertificateRequest, der), block(BlockProvider, []byte("tpm"))), "exactly the blocks"},
		"a fourth block":       {join(block(BlockCertificateRequest, der), block(BlockProvider, []byte("tpm")), block(BlockData, ev(nil)), block("X", nil)), ""},
		"other provider":       {join(block(BlockCertificateRequest, der), block(BlockProvider, []byte("aws")), block(BlockData, ev(nil))), "not supported"},
		"unknown version":      {join(block(BlockCertificateRequest, der), block(BlockProvider, []byte("tpm")), block(BlockData, ev(func(e *EvidenceV1) { e.Version = "v9" }))), "version"},
		"sha1 bank":            {join(block(BlockCertificateRequest, der), block(BlockProvider, []byte("tpm")), block(BlockData, ev(func(e *EvidenceV1) { e.PCRBank = "sha1" }))), "bank"},
		"not JSON":             {join(block(BlockCertificateRequest, der), block(BlockProvider, []byte("tpm")), block(BlockData, []byte("{"))), "attestation data"},
		"oversized evidence":   {join(block(BlockCertificateRequest, der), block(BlockProvider, []byte("tpm")), block(BlockData, make([]byte, MaxEvidenceSize+1))), "exceeds"},
		"headers":              {[]byte("-----BEGIN CERTIFICATE REQUEST-----\nProc-Type: 4,ENCRYPTED\n\nAAAA\n-----END CERTIFICATE REQUEST-----\n"), ""},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseRequest(tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestPCRValuesRefuses(t *testing.T) {
	for name, pcrs := range map[string]map[string][]byte{
		"index 24":     {"24": make([]byte, 32)},
		"leading zero": {"07": make([]byte, 32)},
		"not a number": {"x": make([]byte, 32)},
		"short value":  {"7": make([]byte, 20)},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := (&EvidenceV1{PCRs: pcrs}).PCRValues(); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// rsaEK is the public area of the standard RSA EK for a software key.
func rsaEK(t *testing.T) []byte {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub := tpm2.RSAEKTemplate
	pub.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: key.N.Bytes()})
	return tpm2.Marshal(&pub)
}

func TestParseEKPublicAndChallenge(t *testing.T) {
	area := rsaEK(t)
	ek, key, err := ParseEKPublic(area)
	if err != nil {
		t.Fatal(err)
	}
	if rsaKey, ok := key.(*rsa.PublicKey); !ok || rsaKey.N.BitLen() != 2048 {
		t.Fatalf("EK key %T", key)
	}
	_, akArea := newAK(t)
	ak, err := ParseAK(akArea)
	if err != nil {
		t.Fatal(err)
	}
	c, err := MakeChallenge(ek, ak.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Secret) != SecretSize || len(c.CredentialBlob) == 0 || len(c.EncryptedSecret) != 256 || bytes.Contains(c.CredentialBlob, c.Secret) {
		t.Fatalf("challenge %+v", c)
	}
	if !SecretMatches(c.Secret, SecretHash(c.Secret)) || SecretMatches(append([]byte{}, c.Secret[:31]...), SecretHash(c.Secret)) {
		t.Fatal("secret comparison")
	}
	if bytes.Equal(QualifyingData(c.Secret, []byte("spki-a")), QualifyingData(c.Secret, []byte("spki-b"))) {
		t.Fatal("qualifying data does not depend on the CSR key")
	}

	// An EK whose template was changed (here: not restricted, so usable
	// to decrypt anything) is not accepted as an EK.
	pub, _ := tpm2.Unmarshal[tpm2.TPMTPublic](area)
	pub.ObjectAttributes.Restricted = false
	if _, _, err := ParseEKPublic(tpm2.Marshal(pub)); err == nil || !strings.Contains(err.Error(), "template") {
		t.Fatalf("error %v", err)
	}
	if _, _, err := ParseEKPublic(append(area, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
}

// eccEK is the public area of the standard ECC P-256 EK for a software key.
func eccEK(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := tpm2.ECCEKTemplate
	pub.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{
		X: tpm2.TPM2BECCParameter{Buffer: key.X.FillBytes(make([]byte, 32))},
		Y: tpm2.TPM2BECCParameter{Buffer: key.Y.FillBytes(make([]byte, 32))},
	})
	return tpm2.Marshal(&pub)
}

func TestParseECCEKPublic(t *testing.T) {
	area := eccEK(t)
	ek, key, err := ParseEKPublic(area)
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := key.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Fatalf("EK key %T", key)
	}
	_, akArea := newAK(t)
	ak, _ := ParseAK(akArea)
	if c, err := MakeChallenge(ek, ak.Name); err != nil || len(c.CredentialBlob) == 0 || len(c.EncryptedSecret) == 0 {
		t.Fatalf("challenge to an ECC EK: %+v, %v", c, err)
	}
	// A point off the curve is refused, not used for ECDH.
	pub, _ := tpm2.Unmarshal[tpm2.TPMTPublic](area)
	pub.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{
		X: tpm2.TPM2BECCParameter{Buffer: bytes.Repeat([]byte{1}, 32)}, Y: tpm2.TPM2BECCParameter{Buffer: bytes.Repeat([]byte{2}, 32)},
	})
	if _, _, err := ParseEKPublic(tpm2.Marshal(pub)); err == nil {
		t.Fatal("a point off the curve accepted")
	}
}
