package attest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"

	"github.com/google/go-tpm/tpm2"
)

// FuzzParseAK: any bytes give an AK or an error, never a panic, and an
// accepted area re-encodes to itself (its name covers all of it).
func FuzzParseAK(f *testing.F) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	pub := akTemplate(key)
	f.Add(tpm2.Marshal(&pub))
	f.Fuzz(func(t *testing.T, area []byte) {
		ak, err := ParseAK(area)
		if err != nil {
			return
		}
		pub, err := tpm2.Unmarshal[tpm2.TPMTPublic](area)
		if err != nil || !bytes.Equal(tpm2.Marshal(pub), area) || len(ak.Name) != 34 {
			t.Fatalf("accepted a public area that does not re-encode to itself")
		}
	})
}

// FuzzVerifyQuote: arbitrary quote and signature bytes never panic and are
// never accepted for a fresh key.
func FuzzVerifyQuote(f *testing.F) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	pub := akTemplate(key)
	ak, err := ParseAK(tpm2.Marshal(&pub))
	if err != nil {
		f.Fatal(err)
	}
	pcrs := map[int][]byte{0: make([]byte, 32)}
	sel, _ := Selection(tpm2.TPMAlgSHA256, pcrs)
	attest := tpm2.TPMSAttest{Magic: tpm2.TPMGeneratedValue, Type: tpm2.TPMSTAttestQuote, ExtraData: tpm2.TPM2BData{Buffer: []byte("q")},
		Attested: tpm2.NewTPMUAttest(tpm2.TPMSTAttestQuote, &tpm2.TPMSQuoteInfo{PCRSelect: sel, PCRDigest: tpm2.TPM2BDigest{Buffer: PCRDigest(pcrs)}})}
	sig := tpm2.TPMTSignature{SigAlg: tpm2.TPMAlgECDSA, Signature: tpm2.NewTPMUSignature(tpm2.TPMAlgECDSA, &tpm2.TPMSSignatureECC{
		Hash: tpm2.TPMAlgSHA256, SignatureR: tpm2.TPM2BECCParameter{Buffer: []byte{1}}, SignatureS: tpm2.TPM2BECCParameter{Buffer: []byte{1}}})}
	f.Add(tpm2.Marshal(&attest), tpm2.Marshal(&sig))
	want := QuoteExpectations{QualifyingData: []byte("q"), Bank: tpm2.TPMAlgSHA256, PCRs: pcrs}
	f.Fuzz(func(t *testing.T, quote, signature []byte) {
		if VerifyQuote(ak, quote, signature, want) == nil {
			t.Fatal("accepted a quote the AK never signed")
		}
	})
}

// FuzzParseRequest: any spec.request gives a request or an error, never a
// panic; an accepted one with evidence has a supported version and bank,
// and its PCR map either validates or errors.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nMAA=\n-----END CERTIFICATE REQUEST-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRequest(data)
		if err != nil {
			return
		}
		if r.CSR == nil {
			t.Fatal("accepted without a CSR")
		}
		if r.Evidence != nil {
			if r.Evidence.Version != EvidenceVersionV1 || r.Evidence.PCRBank != "sha256" || r.Provider != ProviderTPM {
				t.Fatalf("accepted evidence %+v", r.Evidence)
			}
			_, _ = r.Evidence.PCRValues()
		}
	})
}

// FuzzParseEKPublic: any bytes give an EK or an error, never a panic (an
// ECC area once made the RSA template comparison panic inside go-tpm).
func FuzzParseEKPublic(f *testing.F) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ak := akTemplate(key)
	f.Add(tpm2.Marshal(&ak))
	ek := tpm2.RSAEKTemplate
	ek.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: bytes.Repeat([]byte{0xc5}, 256)})
	f.Add(tpm2.Marshal(&ek))
	ecc := tpm2.ECCEKTemplate
	ecc.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{
		X: tpm2.TPM2BECCParameter{Buffer: key.X.FillBytes(make([]byte, 32))}, Y: tpm2.TPM2BECCParameter{Buffer: key.Y.FillBytes(make([]byte, 32))},
	})
	f.Add(tpm2.Marshal(&ecc))
	f.Fuzz(func(t *testing.T, area []byte) {
		if pub, key, err := ParseEKPublic(area); err == nil && (pub == nil || key == nil) {
			t.Fatal("accepted without a key")
		}
	})
}

// FuzzParseEKCertificate: any bytes give a certificate or an error, never
// a panic, and nothing over the size cap is parsed.
func FuzzParseEKCertificate(f *testing.F) {
	f.Add([]byte{0x30, 0x03, 0x02, 0x01, 0x01, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		cert, err := ParseEKCertificate(data)
		if err == nil && (cert == nil || len(data) > MaxEKCertificateSize) {
			t.Fatal("accepted an oversized or empty certificate")
		}
	})
}
