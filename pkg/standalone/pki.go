// Package standalone lets rekey-apiserver run with no cluster around it:
// a PKI generated on first start and reused after, an embedded etcd, an
// admin kubeconfig, and a small built-in authorizer.
package standalone

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// File names under <data-dir>/pki.
const (
	ServingCAFile   = "serving-ca.crt"
	servingCAKey    = "serving-ca.key"
	ServingCertFile = "serving.crt"
	ServingKeyFile  = "serving.key"
	ClientCAFile    = "client-ca.crt"
	ClientCAKeyFile = "client-ca.key"
	adminCertFile   = "admin.crt"
	adminKeyFile    = "admin.key"

	// AdminUser is the user name in the admin kubeconfig's certificate.
	AdminUser = "rekey-admin"
	// AdminGroup gives the admin every permission in standalone mode.
	AdminGroup = "system:masters"

	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
)

// PKI is the set of certificates a standalone server uses.
type PKI struct {
	Dir string
}

// Path returns the path of a file in the PKI directory.
func (p PKI) Path(name string) string { return filepath.Join(p.Dir, name) }

// Ensure creates whatever is missing: the serving CA and serving
// certificate (valid for the given host names and IPs), the client CA, and
// the admin client certificate. Existing files are reused untouched, so a
// restart keeps every kubeconfig working.
func (p PKI) Ensure(hosts []string, ips []net.IP) error {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return fmt.Errorf("creating PKI directory: %w", err)
	}
	servingCA, servingCAKeyPair, err := p.ensureCA(ServingCAFile, servingCAKey, "rekey-serving-ca")
	if err != nil {
		return err
	}
	if err := p.ensureLeaf(ServingCertFile, ServingKeyFile, servingCA, servingCAKeyPair, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "rekey-apiserver"},
		DNSNames:    hosts,
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return err
	}
	clientCA, clientCAKey, err := p.ensureCA(ClientCAFile, ClientCAKeyFile, "rekey-client-ca")
	if err != nil {
		return err
	}
	return p.ensureLeaf(adminCertFile, adminKeyFile, clientCA, clientCAKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: AdminUser, Organization: []string{AdminGroup}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (p PKI) ensureCA(certName, keyName, commonName string) (*x509.Certificate, crypto.Signer, error) {
	if cert, key, err := LoadKeyPair(p.Path(certName), p.Path(keyName)); err == nil {
		return cert, key, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating %s key: %w", commonName, err)
	}
	template := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	cert, err := sign(template, key.Public(), nil, key, caValidity)
	if err != nil {
		return nil, nil, fmt.Errorf("self-signing %s: %w", commonName, err)
	}
	if err := writeKeyPair(p.Path(certName), p.Path(keyName), cert, key); err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func (p PKI) ensureLeaf(certName, keyName string, ca *x509.Certificate, caKey crypto.Signer, template *x509.Certificate) error {
	if _, _, err := LoadKeyPair(p.Path(certName), p.Path(keyName)); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating key for %s: %w", certName, err)
	}
	template.KeyUsage = x509.KeyUsageDigitalSignature
	cert, err := sign(template, key.Public(), ca, caKey, leafValidity)
	if err != nil {
		return fmt.Errorf("signing %s: %w", certName, err)
	}
	return writeKeyPair(p.Path(certName), p.Path(keyName), cert, key)
}

// IssueClientCertificate signs a client certificate for any user and groups
// with the standalone client CA. Tests and `make run` users use it to act as
// someone other than the admin.
func (p PKI) IssueClientCertificate(user string, groups []string) (certPEM, keyPEM []byte, err error) {
	ca, caKey, err := LoadKeyPair(p.Path(ClientCAFile), p.Path(ClientCAKeyFile))
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating client key: %w", err)
	}
	cert, err := sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, key.Public(), ca, caKey, leafValidity)
	if err != nil {
		return nil, nil, fmt.Errorf("signing client certificate for %q: %w", user, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding client key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

func sign(template *x509.Certificate, pub crypto.PublicKey, parent *x509.Certificate, parentKey crypto.Signer, validity time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	template.SerialNumber = serial
	template.NotBefore = now.Add(-5 * time.Minute)
	template.NotAfter = now.Add(validity)
	if parent == nil {
		parent = template
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, pub, parentKey)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// LoadKeyPair reads a PEM certificate and PKCS#8 private key.
func LoadKeyPair(certPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	certBlock, _ := pem.Decode(certPEM)
	if certBlock == nil || certBlock.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("%s: no CERTIFICATE PEM block", certPath)
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", certPath, err)
	}
	keyBlock, _ := pem.Decode(keyPEM)
	if keyBlock == nil {
		return nil, nil, fmt.Errorf("%s: no PEM block", keyPath)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	signer, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%s: key of type %T cannot sign", keyPath, parsed)
	}
	return cert, signer, nil
}

// writeKeyPair writes the key first and the certificate last, each through
// a temporary file and a rename, so that a crash never leaves a certificate
// without its key.
func writeKeyPair(certPath, keyPath string, cert *x509.Certificate, key crypto.Signer) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", keyPath, err)
	}
	if err := writeFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o644)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
