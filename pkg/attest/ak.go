package attest

import (
	"crypto/ecdsa"
	"errors"
	"fmt"

	"github.com/google/go-tpm/tpm2"
)

// MaxPublicAreaSize caps an AK public area before it is parsed.
const MaxPublicAreaSize = 1024

// AKTemplate is the public area rekey-agent creates its AK from and the
// only shape ParseAK accepts (with the TPM's point as its unique field): a
// restricted, sign-only ECC P-256 key with ECDSA-SHA256, made inside the
// TPM (fixedTPM, fixedParent, sensitiveDataOrigin).
func AKTemplate() tpm2.TPMTPublic {
	return tpm2.TPMTPublic{
		Type: tpm2.TPMAlgECC, NameAlg: tpm2.TPMAlgSHA256,
		ObjectAttributes: tpm2.TPMAObject{FixedTPM: true, FixedParent: true, SensitiveDataOrigin: true, UserWithAuth: true, Restricted: true, SignEncrypt: true},
		Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgECC, &tpm2.TPMSECCParms{
			Symmetric: tpm2.TPMTSymDefObject{Algorithm: tpm2.TPMAlgNull},
			Scheme: tpm2.TPMTECCScheme{Scheme: tpm2.TPMAlgECDSA,
				Details: tpm2.NewTPMUAsymScheme(tpm2.TPMAlgECDSA, &tpm2.TPMSSigSchemeECDSA{HashAlg: tpm2.TPMAlgSHA256})},
			CurveID: tpm2.TPMECCNistP256,
			KDF:     tpm2.TPMTKDFScheme{Scheme: tpm2.TPMAlgNull},
		}),
	}
}

// AK is a checked attestation key.
type AK struct {
	Public *ecdsa.PublicKey
	// Name is the TPM name (nameAlg SHA-256 ‖ digest of the public area),
	// what the credential-activation challenge is bound to.
	Name []byte
}

// ParseAK parses an AK's public area (TPMT_PUBLIC) and checks that it is a
// key the TPM made and keeps, that signs only what the TPM itself
// produced: ECC P-256 with ECDSA-SHA256, restricted, sign-only, fixedTPM,
// fixedParent, sensitiveDataOrigin, nameAlg SHA-256, the point on the curve.
// Trailing bytes are refused, so the name covers exactly what was checked.
func ParseAK(publicArea []byte) (*AK, error) {
	if len(publicArea) > MaxPublicAreaSize {
		return nil, fmt.Errorf("AK public area of %d bytes exceeds %d", len(publicArea), MaxPublicAreaSize)
	}
	pub, err := unmarshalExact[tpm2.TPMTPublic]("the AK public area", publicArea)
	if err != nil {
		return nil, err
	}
	if pub.Type != tpm2.TPMAlgECC || pub.NameAlg != tpm2.TPMAlgSHA256 {
		return nil, fmt.Errorf("AK must be ECC with nameAlg SHA-256 (type %v, nameAlg %v)", pub.Type, pub.NameAlg)
	}
	a := pub.ObjectAttributes
	for _, want := range []struct {
		name     string
		got, exp bool
	}{
		{"fixedTPM", a.FixedTPM, true},
		{"fixedParent", a.FixedParent, true},
		{"sensitiveDataOrigin", a.SensitiveDataOrigin, true},
		{"restricted", a.Restricted, true},
		{"sign", a.SignEncrypt, true},
		{"decrypt", a.Decrypt, false},
	} {
		if want.got != want.exp {
			return nil, fmt.Errorf("AK attribute %s is %t, must be %t", want.name, want.got, want.exp)
		}
	}
	parms, err := pub.Parameters.ECCDetail()
	if err != nil {
		return nil, fmt.Errorf("AK parameters: %w", err)
	}
	if parms.CurveID != tpm2.TPMECCNistP256 || parms.Scheme.Scheme != tpm2.TPMAlgECDSA {
		return nil, fmt.Errorf("AK must be NIST P-256 with ECDSA (curve %v, scheme %v)", parms.CurveID, parms.Scheme.Scheme)
	}
	scheme, err := parms.Scheme.Details.ECDSA()
	if err != nil || scheme.HashAlg != tpm2.TPMAlgSHA256 {
		return nil, errors.New("AK signing scheme must be ECDSA with SHA-256")
	}
	point, err := pub.Unique.ECC()
	if err != nil {
		return nil, fmt.Errorf("AK public point: %w", err)
	}
	key, err := tpm2.ECDSAPub(parms, point)
	if err != nil {
		return nil, err
	}
	// ECDH conversion refuses a point off the curve (or at infinity).
	if _, err := key.ECDH(); err != nil {
		return nil, fmt.Errorf("AK public point: %w", err)
	}
	name, err := tpm2.ObjectName(pub)
	if err != nil {
		return nil, fmt.Errorf("AK name: %w", err)
	}
	return &AK{Public: key, Name: name.Buffer}, nil
}
