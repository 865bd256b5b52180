package attest

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/google/go-tpm/tpm2"
)

// MaxEKCertificateSize caps an EK certificate before it is parsed (TPM NV
// indexes hold at most a few kilobytes).
const MaxEKCertificateSize = 4096

var (
	oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}
	// oidEKCertificate is tcg-kp-EKCertificate, the EKU of an EK certificate.
	oidEKCertificate = asn1.ObjectIdentifier{2, 23, 133, 8, 1}
)

// ParseEKCertificate parses an EK certificate as TPMs store it: DER,
// possibly followed by padding to the NV index size (dropped), with a
// critical subjectAltName holding the TPM manufacturer and model as a
// directoryName, which crypto/x509 does not handle and is removed from the
// unhandled critical extensions once it is seen to be that SAN.
func ParseEKCertificate(data []byte) (*x509.Certificate, error) {
	if len(data) > MaxEKCertificateSize {
		return nil, fmt.Errorf("EK certificate of %d bytes exceeds %d", len(data), MaxEKCertificateSize)
	}
	var raw asn1.RawValue
	if _, err := asn1.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("EK certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(raw.FullBytes)
	if err != nil {
		return nil, fmt.Errorf("EK certificate: %w", err)
	}
	unhandled := cert.UnhandledCriticalExtensions[:0]
	for _, oid := range cert.UnhandledCriticalExtensions {
		if !oid.Equal(oidSubjectAltName) {
			unhandled = append(unhandled, oid)
		}
	}
	cert.UnhandledCriticalExtensions = unhandled
	return cert, nil
}

// VerifyEKCertificate checks that cert chains to one of roots (through
// intermediates) at now and carries the EK certificate usage.
func VerifyEKCertificate(cert *x509.Certificate, roots, intermediates *x509.CertPool, now time.Time) error {
	if roots == nil {
		return errors.New("no EK root certificates to verify against")
	}
	if _, err := cert.Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: intermediates, CurrentTime: now,
		// EK certificates carry tcg-kp-EKCertificate, which crypto/x509
		// does not know; checked below.
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return fmt.Errorf("EK certificate does not chain to a trusted EK root: %w", err)
	}
	for _, oid := range cert.UnknownExtKeyUsage {
		if oid.Equal(oidEKCertificate) {
			return nil
		}
	}
	return errors.New("certificate is not an EK certificate (no extended key usage 2.23.133.8.1)")
}

// Fingerprint is the hex SHA-256 of a public key's DER
// SubjectPublicKeyInfo: how an EK is named in allow-lists, in status and in
// the binding to its node.
func Fingerprint(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

// ParseEKPublic parses the EK's public area as the node reads it from its
// TPM and checks that it is a standard EK (the TCG templates RSA-2048 or
// ECC NIST P-256: a restricted decryption key whose use needs the
// endorsement hierarchy's policy), so that only that TPM can activate a
// credential made for it. The returned key is the EK's public key
// (*rsa.PublicKey or *ecdsa.PublicKey).
func ParseEKPublic(publicArea []byte) (*tpm2.TPMTPublic, crypto.PublicKey, error) {
	if len(publicArea) > MaxPublicAreaSize {
		return nil, nil, fmt.Errorf("EK public area of %d bytes exceeds %d", len(publicArea), MaxPublicAreaSize)
	}
	pub, err := unmarshalExact[tpm2.TPMTPublic]("the EK public area", publicArea)
	if err != nil {
		return nil, nil, err
	}
	// Everything but the key itself must be the template's. (The union is
	// rebuilt from the parsed key: marshalling a union whose contents do
	// not match its selector panics in go-tpm.)
	var want tpm2.TPMTPublic
	var key crypto.PublicKey
	switch pub.Type {
	case tpm2.TPMAlgRSA:
		modulus, err := pub.Unique.RSA()
		if err != nil {
			return nil, nil, fmt.Errorf("EK public key: %w", err)
		}
		want = tpm2.RSAEKTemplate
		want.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, modulus)
		if !bytes.Equal(tpm2.Marshal(pub), tpm2.Marshal(&want)) {
			return nil, nil, errors.New("EK public area is not the standard RSA-2048 EK template")
		}
		parms, err := pub.Parameters.RSADetail()
		if err != nil {
			return nil, nil, err
		}
		if key, err = tpm2.RSAPub(parms, modulus); err != nil {
			return nil, nil, fmt.Errorf("EK public key: %w", err)
		}
	case tpm2.TPMAlgECC:
		point, err := pub.Unique.ECC()
		if err != nil {
			return nil, nil, fmt.Errorf("EK public key: %w", err)
		}
		want = tpm2.ECCEKTemplate
		want.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, point)
		if !bytes.Equal(tpm2.Marshal(pub), tpm2.Marshal(&want)) {
			return nil, nil, errors.New("EK public area is not the standard ECC P-256 EK template")
		}
		parms, err := pub.Parameters.ECCDetail()
		if err != nil {
			return nil, nil, err
		}
		ecKey, err := tpm2.ECDSAPub(parms, point)
		if err != nil {
			return nil, nil, fmt.Errorf("EK public key: %w", err)
		}
		// ECDSAPub does not check that the point is on the curve; the
		// challenge's ECDH would then leak (or fail) on a chosen point.
		if _, err := ecKey.ECDH(); err != nil {
			return nil, nil, fmt.Errorf("EK public key: %w", err)
		}
		key = ecKey
	default:
		return nil, nil, fmt.Errorf("EK public area is of type %v, not a standard RSA-2048 or ECC P-256 EK", pub.Type)
	}
	return pub, key, nil
}
