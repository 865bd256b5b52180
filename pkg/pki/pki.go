// Package pki makes and stores the small X.509 hierarchies rekey needs for
// its own serving and client certificates (not the signers' CAs, which live
// behind pkg/signing).
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/strictpem"
)

// Backdate is how far before "now" certificates start, to absorb clock skew.
const Backdate = signing.Backdate

// KeyPair is a certificate and its private key.
type KeyPair struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewCA returns a self-signed ECDSA P-256 CA.
func NewCA(commonName string, validity time.Duration) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating key for CA %q: %w", commonName, err)
	}
	return selfSigned(commonName, key, validity)
}

// NewClientCA returns a self-signed RSA-2048 CA for client certificates
// (as kubeadm makes its cluster and front-proxy CAs). A server verifies
// the client CA's signature on every request, not once per connection, and
// an RSA-2048 signature verifies in less than half the time of an ECDSA
// P-256 one (docs/benchmarks-history.md); the CA signs rarely, so its slower
// signing does not matter. Leaf keys stay ECDSA P-256.
func NewClientCA(commonName string, validity time.Duration) (*KeyPair, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generating key for CA %q: %w", commonName, err)
	}
	return selfSigned(commonName, key, validity)
}

func selfSigned(commonName string, key crypto.Signer, validity time.Duration) (*KeyPair, error) {
	cert, err := signing.NewSelfSignedCA(commonName, key, validity, time.Now())
	if err != nil {
		return nil, err
	}
	return &KeyPair{Cert: cert, Key: key}, nil
}

// Issue signs a new ECDSA P-256 key into a leaf certificate built from
// template (subject, SANs, extended key usages).
func (ca *KeyPair) Issue(template *x509.Certificate, validity time.Duration) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating key for %q: %w", template.Subject.CommonName, err)
	}
	t := *template
	if t.KeyUsage == 0 {
		t.KeyUsage = x509.KeyUsageDigitalSignature
	}
	cert, err := sign(&t, key.Public(), ca.Cert, ca.Key, validity)
	if err != nil {
		return nil, fmt.Errorf("signing %q: %w", template.Subject.CommonName, err)
	}
	return &KeyPair{Cert: cert, Key: key}, nil
}

func sign(template *x509.Certificate, pub crypto.PublicKey, parent *x509.Certificate, parentKey crypto.Signer, validity time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	template.SerialNumber = serial
	template.NotBefore = now.Add(-Backdate)
	template.NotAfter = now.Add(validity)
	der, err := x509.CreateCertificate(rand.Reader, template, parent, pub, parentKey)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// CertPEM returns the certificate as PEM.
func (kp *KeyPair) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.Cert.Raw})
}

// KeyPEM returns the private key as PKCS#8 PEM.
func (kp *KeyPair) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(kp.Key)
	if err != nil {
		return nil, fmt.Errorf("encoding private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Write stores the key (mode 0600) and then the certificate, each through a
// temporary file and a rename, so that a crash never leaves a certificate
// without its key.
func (kp *KeyPair) Write(certPath, keyPath string) error {
	keyPEM, err := kp.KeyPEM()
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return WriteFileAtomic(certPath, kp.CertPEM(), 0o644)
}

// Load reads a PEM certificate and its PEM private key (as
// signing.ParsePrivateKeyPEM reads keys).
func Load(certPath, keyPath string) (*KeyPair, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	certBlock, err := strictpem.DecodeOne(certPEM, "CERTIFICATE")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certPath, err)
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certPath, err)
	}
	signer, err := signing.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	return &KeyPair{Cert: cert, Key: signer}, nil
}

// WriteFileAtomic replaces path with data so that a reader sees the old
// file or the new one, whole, even across a crash: a temporary file in the
// same directory, written, given mode and synced, renamed over path, and
// the directory synced (so that the rename itself is durable).
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone already after a successful rename
	_, err = tmp.Write(data)
	if err == nil {
		// Chmod, not the create mode: the umask does not apply.
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if closeErr := tmp.Close(); err == nil {
		err = closeErr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if closeErr := d.Close(); err == nil {
		err = closeErr
	}
	return err
}
