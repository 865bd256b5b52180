package signing

import (
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"
)

// Backdate is how far before the signing time certificates start, to absorb
// clock skew between the signer and relying parties.
const Backdate = 5 * time.Minute

// Issuance is what the signer decided to put into a certificate.
type Issuance struct {
	Request     *x509.CertificateRequest
	KeyUsage    x509.KeyUsage
	ExtKeyUsage []x509.ExtKeyUsage
	Duration    time.Duration
	Now         time.Time
	// Backdate, when set, replaces the package's Backdate: a
	// PodCertificateRequest's notBefore must be within 5 minutes of
	// kube-apiserver's clock when its status is written.
	Backdate time.Duration
	// CRLDistributionPoints are the URLs of the certificate's CRL
	// distribution points extension (none when empty), already expanded.
	CRLDistributionPoints []string
}

// Issue signs the request's public key, subject and subject alternative
// names (nothing else from the request) into a leaf certificate, never a CA.
// It returns the certificate in PEM and parsed.
func Issue(in Issuance, ca *x509.Certificate, caKey crypto.Signer) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	backdate := Backdate
	if in.Backdate > 0 {
		backdate = in.Backdate
	}
	notBefore := in.Now.Add(-backdate)
	notAfter := in.Now.Add(in.Duration)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	if notBefore.Before(ca.NotBefore) {
		notBefore = ca.NotBefore
	}
	req := in.Request
	template := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               subjectOf(req),
		DNSNames:              req.DNSNames,
		IPAddresses:           req.IPAddresses,
		EmailAddresses:        req.EmailAddresses,
		URIs:                  req.URIs,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              in.KeyUsage,
		ExtKeyUsage:           in.ExtKeyUsage,
		BasicConstraintsValid: true,
		IsCA:                  false,
		SubjectKeyId:          subjectKeyID(req.RawSubjectPublicKeyInfo),
		CRLDistributionPoints: in.CRLDistributionPoints,
	}
	der, err := createCertificate(template, ca, req.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing: %w", err)
	}
	// Parsing what was made is also the check that it is a certificate.
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert, nil
}

// subjectOf copies the request's subject as it was encoded.
func subjectOf(req *x509.CertificateRequest) pkix.Name {
	s := req.Subject
	s.ExtraNames = s.Names
	return s
}

func subjectKeyID(spki []byte) []byte {
	sum := sha256.Sum256(spki)
	return sum[:20]
}

// NewSelfSignedCA makes a CA certificate for key.
func NewSelfSignedCA(commonName string, key crypto.Signer, validity time.Duration, now time.Time) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	spki, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, err
	}
	template := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		SubjectKeyId:          subjectKeyID(spki),
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-signing CA %q: %w", commonName, err)
	}
	return x509.ParseCertificate(der)
}

// Fingerprint is "SHA256:" and the hex SHA-256 of a certificate's DER.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return fmt.Sprintf("SHA256:%x", sum)
}
