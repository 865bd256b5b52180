package signing

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"rekey.io/rekey/pkg/strictpem"
)

// MaxCAFileBytes caps CA files read from disk before parsing.
const MaxCAFileBytes = 1 << 20

// maxCAFileBlocks caps the certificates in a CA certificate file.
const maxCAFileBlocks = 16

// FileCA adopts an existing CA from PEM files and picks up replaced files
// without a restart: every Current call compares the files' size and
// modification time and re-reads them when they changed.
type FileCA struct {
	CertFile, KeyFile string

	mu     sync.Mutex
	stamp  string
	cert   *x509.Certificate
	signer crypto.Signer
}

// Current returns the CA certificate and key as they are on disk now.
func (f *FileCA) Current() (*x509.Certificate, crypto.Signer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	stamp, err := fileStamp(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, nil, err
	}
	if stamp == f.stamp && f.cert != nil {
		return f.cert, f.signer, nil
	}
	cert, signer, err := LoadCAFiles(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, nil, err
	}
	f.stamp, f.cert, f.signer = stamp, cert, signer
	return cert, signer, nil
}

func fileStamp(paths ...string) (string, error) {
	var b bytes.Buffer
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("CA file: %w", err)
		}
		fmt.Fprintf(&b, "%s:%d:%d;", p, st.Size(), st.ModTime().UnixNano())
	}
	return b.String(), nil
}

// LoadCAFiles reads a CA certificate and its private key (PKCS#8, PKCS#1
// or SEC 1) and checks that they belong together and that the certificate
// is a CA.
func LoadCAFiles(certFile, keyFile string) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := readCapped(certFile)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := readCapped(keyFile)
	if err != nil {
		return nil, nil, err
	}
	// The CA certificate comes first; a bundle may follow it. Nothing but
	// PEM blocks and whitespace is accepted (package strictpem).
	blocks, err := strictpem.Decode(certPEM, maxCAFileBlocks)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", certFile, err)
	}
	if len(blocks) == 0 || blocks[0].Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("%s: must start with a CERTIFICATE PEM block", certFile)
	}
	cert, err := x509.ParseCertificate(blocks[0].Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", certFile, err)
	}
	if !cert.IsCA {
		return nil, nil, fmt.Errorf("%s: not a CA certificate (basicConstraints CA is false)", certFile)
	}
	signer, err := ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	if !PublicKeysEqual(cert.PublicKey, signer.Public()) {
		return nil, nil, fmt.Errorf("%s does not hold the private key of %s", keyFile, certFile)
	}
	return cert, signer, nil
}

func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only
	data, err := io.ReadAll(io.LimitReader(f, MaxCAFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > MaxCAFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, MaxCAFileBytes)
	}
	return data, nil
}

// ParsePrivateKeyPEM reads a private key file, the one parser rekey uses for
// keys on disk: one private key block (PKCS#8, PKCS#1 or SEC 1), optionally
// after the "EC PARAMETERS" block that `openssl ecparam -genkey` writes,
// with nothing but whitespace around. Errors name the file's structure,
// never its content.
func ParsePrivateKeyPEM(data []byte) (crypto.Signer, error) {
	blocks, err := strictpem.Decode(data, 2)
	if err != nil {
		return nil, err
	}
	if len(blocks) == 2 && blocks[0].Type == "EC PARAMETERS" {
		blocks = blocks[1:]
	}
	if len(blocks) != 1 {
		return nil, errors.New("must hold exactly one private key PEM block")
	}
	block := blocks[0]
	var key any
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("unsupported PEM type %q", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%s PEM block does not parse", block.Type)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key of type %T cannot sign", key)
	}
	return signer, nil
}

type equaler interface{ Equal(crypto.PublicKey) bool }

// PublicKeysEqual reports whether two public keys are the same key.
func PublicKeysEqual(a, b crypto.PublicKey) bool {
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}
