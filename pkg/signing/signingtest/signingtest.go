// Package signingtest has a key store in memory for unit tests.
package signingtest

import (
	"context"
	"crypto"
	"sync"

	"rekey.io/rekey/pkg/signing"
)

// MemoryKeys is a signing.KeyStore in memory. Keys holds what it made.
type MemoryKeys struct {
	mu   sync.Mutex
	Keys map[string]crypto.Signer
}

// NewMemoryKeys returns an empty store.
func NewMemoryKeys() *MemoryKeys { return &MemoryKeys{Keys: map[string]crypto.Signer{}} }

// GetOrCreate implements signing.KeyStore.
func (m *MemoryKeys) GetOrCreate(_ context.Context, id string, alg signing.Algorithm) (crypto.Signer, bool, error) {
	if err := signing.ValidateKeyID(id); err != nil {
		return nil, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.Keys[id]; ok {
		return k, false, nil
	}
	k, err := signing.GenerateKey(alg)
	if err != nil {
		return nil, false, err
	}
	m.Keys[id] = k
	return k, true, nil
}

// Get implements signing.KeyStore.
func (m *MemoryKeys) Get(_ context.Context, id string) (crypto.Signer, error) {
	if err := signing.ValidateKeyID(id); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.Keys[id]; ok {
		return k, nil
	}
	return nil, signing.ErrNotFound
}

// Delete implements signing.KeyStore.
func (m *MemoryKeys) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.Keys, id)
	return nil
}
