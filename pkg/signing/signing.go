// Package signing keeps CA private keys behind one interface. A KeyStore
// creates, finds and destroys keys by ID; the private key material never
// leaves the store except as a crypto.Signer handle, and is never put into
// an API object or a log line.
package signing

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"strings"
)

// Algorithm is a key algorithm, named as in the CertificateAuthority API.
type Algorithm string

// Supported algorithms.
const (
	ECDSAP256 Algorithm = "ECDSA-P256"
	ECDSAP384 Algorithm = "ECDSA-P384"
	RSA2048   Algorithm = "RSA-2048"
	RSA3072   Algorithm = "RSA-3072"
	RSA4096   Algorithm = "RSA-4096"
	Ed25519   Algorithm = "Ed25519"
)

// ErrNotFound is returned by Get for a key ID the store does not hold.
var ErrNotFound = errors.New("key not found")

// MaxKeyIDLength caps key IDs: a CA name (253) and a short suffix.
const MaxKeyIDLength = 300

// ValidateKeyID accepts plain names only: lower-case letters, digits, '-'
// and '.', starting and ending with a letter or digit, and no "..". Key IDs
// become etcd keys and PKCS#11 labels, so a '/' or ".." would reach keys
// outside the CA key prefix.
func ValidateKeyID(keyID string) error {
	if keyID == "" || len(keyID) > MaxKeyIDLength || strings.Contains(keyID, "..") {
		return fmt.Errorf("invalid key ID %q: must be 1 to %d lower-case letters, digits, '-' and '.'", truncate(keyID), MaxKeyIDLength)
	}
	for i, r := range keyID {
		alnum := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || i == len(keyID)-1 || r != '-' && r != '.') {
			return fmt.Errorf("invalid key ID %q: must be lower-case letters, digits, '-' and '.', starting and ending with a letter or digit", truncate(keyID))
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// KeyStore holds CA private keys.
type KeyStore interface {
	// GetOrCreate returns the key with this ID, generating and storing it
	// first if the store has none. Calling it again after a crash returns
	// the key stored the first time, so a CA never ends up with two keys.
	GetOrCreate(ctx context.Context, keyID string, alg Algorithm) (signer crypto.Signer, created bool, err error)
	// Get returns the key with this ID, or ErrNotFound.
	Get(ctx context.Context, keyID string) (crypto.Signer, error)
	// Delete destroys the key; deleting a missing key is not an error.
	Delete(ctx context.Context, keyID string) error
}

func knownAlgorithm(alg Algorithm) bool {
	switch alg {
	case ECDSAP256, ECDSAP384, RSA2048, RSA3072, RSA4096, Ed25519:
		return true
	}
	return false
}

// GenerateKey makes a software key of the given algorithm.
func GenerateKey(alg Algorithm) (crypto.Signer, error) {
	switch alg {
	case ECDSAP256, "":
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case ECDSAP384:
		return ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case RSA2048:
		return rsa.GenerateKey(rand.Reader, 2048)
	case RSA3072:
		return rsa.GenerateKey(rand.Reader, 3072)
	case RSA4096:
		return rsa.GenerateKey(rand.Reader, 4096)
	case Ed25519:
		_, key, err := ed25519.GenerateKey(rand.Reader)
		return key, err
	default:
		return nil, fmt.Errorf("unsupported key algorithm %q", alg)
	}
}
