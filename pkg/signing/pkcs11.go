//go:build cgo

package signing

import (
	"context"
	"crypto"
	"crypto/elliptic"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/ThalesGroup/crypto11"
)

// PKCS11KeyStore keeps keys in a PKCS#11 token; they are generated inside
// the token and never leave it. Keys are found by CKA_ID and CKA_LABEL,
// both set to the key ID.
type PKCS11KeyStore struct {
	mu  sync.Mutex
	ctx *crypto11.Context
}

// PKCS11Config locates a token.
type PKCS11Config struct {
	ModulePath string
	TokenLabel string
	PINFile    string
}

var (
	pkcs11Mu       sync.Mutex
	pkcs11Contexts = map[PKCS11Config]*PKCS11KeyStore{}
)

// OpenPKCS11 returns the key store for a token, opening the module once per
// configuration: PKCS#11 modules must be initialized only once per process.
func OpenPKCS11(cfg PKCS11Config) (*PKCS11KeyStore, error) {
	pkcs11Mu.Lock()
	defer pkcs11Mu.Unlock()
	if s, ok := pkcs11Contexts[cfg]; ok {
		return s, nil
	}
	pin, err := readCapped(cfg.PINFile)
	if err != nil {
		return nil, fmt.Errorf("reading PKCS#11 PIN file: %w", err)
	}
	ctx, err := crypto11.Configure(&crypto11.Config{
		Path:       cfg.ModulePath,
		TokenLabel: cfg.TokenLabel,
		Pin:        strings.TrimSpace(string(pin)),
	})
	if err != nil {
		return nil, fmt.Errorf("opening PKCS#11 token %q with %s: %w", cfg.TokenLabel, cfg.ModulePath, err)
	}
	s := &PKCS11KeyStore{ctx: ctx}
	pkcs11Contexts[cfg] = s
	return s, nil
}

// GetOrCreate implements KeyStore.
func (s *PKCS11KeyStore) GetOrCreate(ctx context.Context, keyID string, alg Algorithm) (crypto.Signer, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if found, err := s.find(keyID); err == nil {
		return found, false, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, false, err
	}
	id := []byte(keyID)
	var (
		signer crypto.Signer
		err    error
	)
	switch alg {
	case ECDSAP256, "":
		signer, err = s.ctx.GenerateECDSAKeyPairWithLabel(id, id, elliptic.P256())
	case ECDSAP384:
		signer, err = s.ctx.GenerateECDSAKeyPairWithLabel(id, id, elliptic.P384())
	case RSA2048:
		signer, err = s.ctx.GenerateRSAKeyPairWithLabel(id, id, 2048)
	case RSA3072:
		signer, err = s.ctx.GenerateRSAKeyPairWithLabel(id, id, 3072)
	case RSA4096:
		signer, err = s.ctx.GenerateRSAKeyPairWithLabel(id, id, 4096)
	default:
		return nil, false, fmt.Errorf("the PKCS#11 key store does not support %q", alg)
	}
	if err != nil {
		return nil, false, fmt.Errorf("generating key %s in the token: %w", keyID, err)
	}
	return signer, true, nil
}

// Get implements KeyStore.
func (s *PKCS11KeyStore) Get(ctx context.Context, keyID string) (crypto.Signer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	signer, err := s.find(keyID)
	if err != nil {
		return nil, err
	}
	return signer, nil
}

func (s *PKCS11KeyStore) find(keyID string) (crypto11.Signer, error) {
	if err := ValidateKeyID(keyID); err != nil {
		return nil, err
	}
	// FindKeyPairs, unlike FindKeyPair, tells "none" apart from a failure.
	signers, err := s.ctx.FindKeyPairs([]byte(keyID), []byte(keyID))
	if err != nil {
		return nil, fmt.Errorf("looking up key %s in the token: %w", keyID, err)
	}
	if len(signers) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, keyID)
	}
	return signers[0], nil
}

// Delete implements KeyStore.
func (s *PKCS11KeyStore) Delete(ctx context.Context, keyID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	signer, err := s.find(keyID)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return signer.Delete()
}
