package attest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/google/go-tpm/tpm2"
)

// akTemplate is the public area a TPM gives for rekey-agent's AK with
// key's point.
func akTemplate(key *ecdsa.PrivateKey) tpm2.TPMTPublic {
	pub := AKTemplate()
	pub.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{
		X: tpm2.TPM2BECCParameter{Buffer: key.X.FillBytes(make([]byte, 32))},
		Y: tpm2.TPM2BECCParameter{Buffer: key.Y.FillBytes(make([]byte, 32))},
	})
	return pub
}

func newAK(t *testing.T) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := akTemplate(key)
	return key, tpm2.Marshal(&pub)
}

func TestParseAK(t *testing.T) {
	key, area := newAK(t)
	ak, err := ParseAK(area)
	if err != nil {
		t.Fatal(err)
	}
	pub := akTemplate(key)
	name, _ := tpm2.ObjectName(&pub)
	if !bytes.Equal(ak.Name, name.Buffer) || len(ak.Name) != 34 || ak.Name[0] != 0x00 || ak.Name[1] != 0x0b {
		t.Fatalf("name %x", ak.Name)
	}
	sum := sha256.Sum256(area)
	if !bytes.Equal(ak.Name[2:], sum[:]) {
		t.Fatal("name is not SHA-256 of the public area")
	}

	for name, tc := range map[string]struct {
		mutate func(*tpm2.TPMTPublic)
		raw    func([]byte) []byte
		want   string
	}{
		"not restricted":  {mutate: func(p *tpm2.TPMTPublic) { p.ObjectAttributes.Restricted = false }, want: "restricted"},
		"also decrypts":   {mutate: func(p *tpm2.TPMTPublic) { p.ObjectAttributes.Decrypt = true }, want: "decrypt"},
		"not fixedTPM":    {mutate: func(p *tpm2.TPMTPublic) { p.ObjectAttributes.FixedTPM = false }, want: "fixedTPM"},
		"not fixedParent": {mutate: func(p *tpm2.TPMTPublic) { p.ObjectAttributes.FixedParent = false }, want: "fixedParent"},
		"imported key":    {mutate: func(p *tpm2.TPMTPublic) { p.ObjectAttributes.SensitiveDataOrigin = false }, want: "sensitiveDataOrigin"},
		"SHA-1 name":      {mutate: func(p *tpm2.TPMTPublic) { p.NameAlg = tpm2.TPMAlgSHA1 }, want: "nameAlg"},
		"trailing byte":   {raw: func(b []byte) []byte { return append(b, 0) }, want: "trailing"},
		"oversized":       {raw: func(b []byte) []byte { return append(b, make([]byte, MaxPublicAreaSize)...) }, want: "exceeds"},
		"truncated":       {raw: func(b []byte) []byte { return b[:len(b)-3] }, want: "parsing"},
		"point off curve": {mutate: func(p *tpm2.TPMTPublic) { pt, _ := p.Unique.ECC(); pt.Y.Buffer[31] ^= 1 }, want: "point"},
	} {
		t.Run(name, func(t *testing.T) {
			pub := akTemplate(key)
			if tc.mutate != nil {
				tc.mutate(&pub)
			}
			b := tpm2.Marshal(&pub)
			if tc.raw != nil {
				b = tc.raw(b)
			}
			if _, err := ParseAK(b); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// quote makes what TPM2_Quote returns for these values, signed by key.
func quote(t *testing.T, key *ecdsa.PrivateKey, extra []byte, pcrs map[int][]byte, mutate func(*tpm2.TPMSAttest)) ([]byte, []byte) {
	t.Helper()
	sel, err := Selection(tpm2.TPMAlgSHA256, pcrs)
	if err != nil {
		t.Fatal(err)
	}
	attest := tpm2.TPMSAttest{
		Magic: tpm2.TPMGeneratedValue, Type: tpm2.TPMSTAttestQuote,
		ExtraData: tpm2.TPM2BData{Buffer: extra},
		Attested:  tpm2.NewTPMUAttest(tpm2.TPMSTAttestQuote, &tpm2.TPMSQuoteInfo{PCRSelect: sel, PCRDigest: tpm2.TPM2BDigest{Buffer: PCRDigest(pcrs)}}),
	}
	if mutate != nil {
		mutate(&attest)
	}
	q := tpm2.Marshal(&attest)
	return q, sign(t, key, q)
}

func sign(t *testing.T, key *ecdsa.PrivateKey, data []byte) []byte {
	t.Helper()
	d := sha256.Sum256(data)
	r, s, err := ecdsa.Sign(rand.Reader, key, d[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := tpm2.TPMTSignature{SigAlg: tpm2.TPMAlgECDSA, Signature: tpm2.NewTPMUSignature(tpm2.TPMAlgECDSA, &tpm2.TPMSSignatureECC{
		Hash: tpm2.TPMAlgSHA256, SignatureR: tpm2.TPM2BECCParameter{Buffer: r.Bytes()}, SignatureS: tpm2.TPM2BECCParameter{Buffer: s.Bytes()},
	})}
	return tpm2.Marshal(&sig)
}

func TestVerifyQuote(t *testing.T) {
	key, area := newAK(t)
	ak, err := ParseAK(area)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := newAK(t)
	pcr := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	expected := map[int][]byte{0: pcr(1), 7: pcr(7)}
	want := QuoteExpectations{QualifyingData: bytes.Repeat([]byte{0xab}, 32), Bank: tpm2.TPMAlgSHA256, PCRs: expected}

	q, sig := quote(t, key, want.QualifyingData, expected, nil)
	if err := VerifyQuote(ak, q, sig, want); err != nil {
		t.Fatalf("a good quote refused: %v", err)
	}

	for name, tc := range map[string]struct {
		make func() ([]byte, []byte)
		want string
	}{
		"replayed for another request": {make: func() ([]byte, []byte) {
			return quote(t, key, bytes.Repeat([]byte{0xcd}, 32), expected, nil)
		}, want: "qualifying data"},
		"more PCRs than the policy (CVE-2022-0317)": {make: func() ([]byte, []byte) {
			return quote(t, key, want.QualifyingData, map[int][]byte{0: pcr(1), 7: pcr(7), 8: pcr(8)}, nil)
		}, want: "selection"},
		"other PCRs, same count": {make: func() ([]byte, []byte) {
			return quote(t, key, want.QualifyingData, map[int][]byte{0: pcr(1), 6: pcr(7)}, nil)
		}, want: "selection"},
		"changed PCR value": {make: func() ([]byte, []byte) {
			return quote(t, key, want.QualifyingData, map[int][]byte{0: pcr(1), 7: pcr(9)}, nil)
		}, want: "PCR values differ"},
		"signed by another key": {make: func() ([]byte, []byte) {
			return quote(t, other, want.QualifyingData, expected, nil)
		}, want: "not the AK's"},
		"not TPM-generated": {make: func() ([]byte, []byte) {
			return quote(t, key, want.QualifyingData, expected, func(a *tpm2.TPMSAttest) { a.Magic = 0x12345678 })
		}, want: "not made by a TPM"},
		"trailing bytes (signed)": {make: func() ([]byte, []byte) {
			q, _ := quote(t, key, want.QualifyingData, expected, nil)
			q = append(q, 0)
			return q, sign(t, key, q)
		}, want: "trailing"},
		"tampered after signing": {make: func() ([]byte, []byte) {
			q, sig := quote(t, key, want.QualifyingData, expected, nil)
			q[len(q)-1] ^= 1
			return q, sig
		}, want: "not the AK's"},
		"oversized": {make: func() ([]byte, []byte) {
			return make([]byte, MaxQuoteSize+1), sig
		}, want: "exceeds"},
	} {
		t.Run(name, func(t *testing.T) {
			q, s := tc.make()
			if err := VerifyQuote(ak, q, s, want); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}
