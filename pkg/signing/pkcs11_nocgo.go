//go:build !cgo

package signing

import (
	"context"
	"crypto"
	"errors"
)

// ErrNoPKCS11 is what a build without cgo answers for a PKCS#11 key store:
// PKCS#11 modules are C libraries, loaded with dlopen, which a static Go
// binary (the container image's) cannot do.
var ErrNoPKCS11 = errors.New("this rekey-apiserver was built without cgo and cannot load PKCS#11 modules; use a build with cgo (see docs/install.md)")

// PKCS11KeyStore is the PKCS#11 key store; in this build every call fails
// with ErrNoPKCS11.
type PKCS11KeyStore struct{}

// PKCS11Config locates a token.
type PKCS11Config struct {
	ModulePath string
	TokenLabel string
	PINFile    string
}

// OpenPKCS11 fails: no PKCS#11 in a build without cgo.
func OpenPKCS11(PKCS11Config) (*PKCS11KeyStore, error) { return nil, ErrNoPKCS11 }

// GetOrCreate implements KeyStore.
func (*PKCS11KeyStore) GetOrCreate(context.Context, string, Algorithm) (crypto.Signer, bool, error) {
	return nil, false, ErrNoPKCS11
}

// Get implements KeyStore.
func (*PKCS11KeyStore) Get(context.Context, string) (crypto.Signer, error) { return nil, ErrNoPKCS11 }

// Delete implements KeyStore.
func (*PKCS11KeyStore) Delete(context.Context, string) error { return ErrNoPKCS11 }
