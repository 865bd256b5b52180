package attest

import (
	"bytes"
	"crypto"
	"crypto/rsa"
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
// TPM and checks that it is the standard RSA-2048 EK (the TCG template:
// restricted decryption key whose use needs the endorsement hierarchy's
// policy), so that only that TPM can activate a credential made for it.
// The returned key is the EK's RSA public key.
func ParseEKPublic(publicArea []byte) (*tpm2.TPMTPublic, *rsa.PublicKey, error) {
	if len(publicArea) > MaxPublicAreaSize {
		return nil, nil, fmt.Errorf("EK public area of %d bytes exceeds %d", len(publicArea), MaxPublicAreaSize)
	}
	pub, err := unmarshalExact[tpm2.TPMTPublic]("the EK public area", publicArea)
	if err != nil {
		return nil, nil, err
	}
	if pub.Type != tpm2.TPMAlgRSA {
		return nil, nil, fmt.Errorf("EK public area is of type %v, not the standard RSA-2048 EK", pub.Type)
	}
	modulus, err := pub.Unique.RSA()
	if err != nil {
		return nil, nil, fmt.Errorf("EK public key: %w", err)
	}
	// Everything but the key itself must be the template's. (The union is
	// rebuilt from the parsed modulus: marshalling a union whose contents
	// do not match its selector panics in go-tpm.)
	want := tpm2.RSAEKTemplate
	want.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, modulus)
	if !bytes.Equal(tpm2.Marshal(pub), tpm2.Marshal(&want)) {
		return nil, nil, errors.New("EK public area is not the standard RSA-2048 EK template")
	}
	rsaParms, err := pub.Parameters.RSADetail()
	if err != nil {
		return nil, nil, err
	}
	key, err := tpm2.RSAPub(rsaParms, modulus)
	if err != nil {
		return nil, nil, fmt.Errorf("EK public key: %w", err)
	}
	return pub, key, nil
}
