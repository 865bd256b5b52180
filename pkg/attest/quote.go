package attest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"

	"github.com/google/go-tpm/tpm2"
)

// Size caps applied before parsing a quote and its signature.
const (
	MaxQuoteSize     = 1024
	MaxSignatureSize = 256
)

// QuoteExpectations are what a quote must show, all from the server's own
// records, never from the node's evidence.
type QuoteExpectations struct {
	// QualifyingData is recomputed by the server: SHA-256 of the stored
	// challenge secret ‖ the CSR key's SubjectPublicKeyInfo.
	QualifyingData []byte
	// Bank is the PCR bank of the policy; PCRs its exact selection with the
	// values expected (the policy's, or the node's first recorded ones).
	Bank tpm2.TPMIAlgHash
	PCRs map[int][]byte
}

// VerifyQuote checks a quote (TPMS_ATTEST) and its signature (TPMT_SIGNATURE)
// made by ak: the TPM_GENERATED magic and type quote, nothing after the
// structure, qualifying data equal to the expected (constant time), the PCR
// selection exactly the expected one (a quote over other or more PCRs is
// refused, CVE-2022-0317), the PCR digest equal to the digest of the
// expected values, and an ECDSA-SHA256 signature by the AK.
func VerifyQuote(ak *AK, quote, signature []byte, want QuoteExpectations) error {
	if len(quote) > MaxQuoteSize || len(signature) > MaxSignatureSize {
		return fmt.Errorf("quote (%d bytes) or signature (%d bytes) exceeds %d/%d", len(quote), len(signature), MaxQuoteSize, MaxSignatureSize)
	}
	// The signature first: nothing in an unsigned structure is worth a
	// closer look.
	if err := verifySignature(ak, quote, signature); err != nil {
		return err
	}
	attest, err := unmarshalExact[tpm2.TPMSAttest]("the quote", quote)
	if err != nil {
		return err
	}
	if err := attest.Magic.Check(); err != nil {
		return fmt.Errorf("quote was not made by a TPM: %w", err)
	}
	if attest.Type != tpm2.TPMSTAttestQuote {
		return fmt.Errorf("attestation of type %v is not a quote", attest.Type)
	}
	info, err := attest.Attested.Quote()
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare(attest.ExtraData.Buffer, want.QualifyingData) != 1 {
		return errors.New("quote's qualifying data does not match this challenge and this request's key (replayed or copied evidence)")
	}
	selection, err := Selection(want.Bank, want.PCRs)
	if err != nil {
		return err
	}
	if !bytes.Equal(tpm2.Marshal(&info.PCRSelect), tpm2.Marshal(&selection)) {
		return fmt.Errorf("quote's PCR selection is not exactly the policy's %v", slices.Sorted(maps.Keys(want.PCRs)))
	}
	if !bytes.Equal(info.PCRDigest.Buffer, PCRDigest(want.PCRs)) {
		return errors.New("quoted PCR values differ from the expected ones")
	}
	return nil
}

func verifySignature(ak *AK, quote, signature []byte) error {
	sig, err := unmarshalExact[tpm2.TPMTSignature]("the quote signature", signature)
	if err != nil {
		return err
	}
	if sig.SigAlg != tpm2.TPMAlgECDSA {
		return fmt.Errorf("quote signature algorithm %v is not ECDSA", sig.SigAlg)
	}
	ecc, err := sig.Signature.ECDSA()
	if err != nil {
		return err
	}
	if ecc.Hash != tpm2.TPMAlgSHA256 {
		return fmt.Errorf("quote signature hash %v is not SHA-256", ecc.Hash)
	}
	digest := sha256.Sum256(quote)
	r, s := new(big.Int).SetBytes(ecc.SignatureR.Buffer), new(big.Int).SetBytes(ecc.SignatureS.Buffer)
	if !ecdsa.Verify(ak.Public, digest[:], r, s) {
		return errors.New("quote signature is not the AK's")
	}
	return nil
}

// Selection is the TPM PCR selection (3-byte bitmap, PC Client) of the
// given PCR indexes in one bank.
func Selection(bank tpm2.TPMIAlgHash, pcrs map[int][]byte) (tpm2.TPMLPCRSelection, error) {
	bitmap := make([]byte, 3)
	for i := range pcrs {
		if i < 0 || i >= 24 {
			return tpm2.TPMLPCRSelection{}, fmt.Errorf("PCR index %d outside 0-23", i)
		}
		bitmap[i/8] |= 1 << (i % 8)
	}
	return tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{{Hash: bank, PCRSelect: bitmap}}}, nil
}

// PCRDigest is what a TPM quotes for these values: SHA-256 over the values
// concatenated in ascending PCR order (the AK's nameAlg is SHA-256).
func PCRDigest(pcrs map[int][]byte) []byte {
	h := sha256.New()
	for _, i := range slices.Sorted(maps.Keys(pcrs)) {
		h.Write(pcrs[i])
	}
	return h.Sum(nil)
}
