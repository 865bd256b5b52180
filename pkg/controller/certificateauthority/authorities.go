// Package certificateauthority creates CA keys and certificates for
// CertificateAuthority objects, reports whether each CA can sign, and gives
// the signer controller each CA's certificate and key.
package certificateauthority

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sync"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/signing"
)

// KeyStores resolves a CA's keyStore spec to a key store.
type KeyStores struct {
	// Etcd is the encrypted etcd store; nil when no key-encryption key is
	// configured.
	Etcd signing.KeyStore
}

// For returns the key store of a CA; File CAs have none (see Authorities).
func (k *KeyStores) For(ks rotationv1alpha1.KeyStore) (signing.KeyStore, error) {
	switch ks.Type {
	case rotationv1alpha1.KeyStoreEtcd, "":
		if k.Etcd == nil {
			return nil, errors.New("the Etcd key store is not configured: start rekey-apiserver with --ca-key-encryption-key-file")
		}
		return k.Etcd, nil
	case rotationv1alpha1.KeyStorePKCS11:
		if ks.Pkcs11 == nil {
			return nil, errors.New("keyStore.pkcs11 is missing")
		}
		return signing.OpenPKCS11(signing.PKCS11Config{ModulePath: ks.Pkcs11.ModulePath, TokenLabel: ks.Pkcs11.TokenLabel, PINFile: ks.Pkcs11.PINFile})
	default:
		return nil, fmt.Errorf("key store %q holds no generated keys", ks.Type)
	}
}

// Authority is a CA ready to sign.
type Authority struct {
	Name   string
	KeyID  string
	Cert   *x509.Certificate
	Signer crypto.Signer
}

// Authorities hands out CAs by name, caching decrypted or opened keys by
// key ID so that signing does not go back to the store each time.
type Authorities struct {
	Lister rotationlisters.CertificateAuthorityLister
	Stores *KeyStores

	mu    sync.Mutex
	keys  map[string]*Authority
	files map[string]*signing.FileCA
}

// NewAuthorities returns an empty cache.
func NewAuthorities(lister rotationlisters.CertificateAuthorityLister, stores *KeyStores) *Authorities {
	return &Authorities{Lister: lister, Stores: stores, keys: map[string]*Authority{}, files: map[string]*signing.FileCA{}}
}

// Get returns the CA's current certificate and key.
func (a *Authorities) Get(ctx context.Context, name string) (*Authority, error) {
	ca, err := a.Lister.Get(name)
	if err != nil {
		return nil, fmt.Errorf("CertificateAuthority %q: %w", name, err)
	}
	if ca.Spec.KeyStore.Type == rotationv1alpha1.KeyStoreFile {
		return a.fromFiles(ca)
	}
	cur := ca.Status.Current
	if cur == nil || cur.KeyID == "" {
		return nil, fmt.Errorf("CertificateAuthority %q has no certificate yet", name)
	}
	a.mu.Lock()
	cached, ok := a.keys[cur.KeyID]
	a.mu.Unlock()
	if ok && cached.Name == name {
		return cached, nil
	}
	store, err := a.Stores.For(ca.Spec.KeyStore)
	if err != nil {
		return nil, err
	}
	signer, err := store.Get(ctx, cur.KeyID)
	if err != nil {
		return nil, fmt.Errorf("CertificateAuthority %q: %w", name, err)
	}
	cert, err := ParseCertificatePEM(cur.Certificate)
	if err != nil {
		return nil, fmt.Errorf("CertificateAuthority %q status: %w", name, err)
	}
	auth := &Authority{Name: name, KeyID: cur.KeyID, Cert: cert, Signer: signer}
	a.mu.Lock()
	a.keys[cur.KeyID] = auth
	a.mu.Unlock()
	return auth, nil
}

func (a *Authorities) fromFiles(ca *rotationv1alpha1.CertificateAuthority) (*Authority, error) {
	if ca.Spec.KeyStore.File == nil {
		return nil, errors.New("keyStore.file is missing")
	}
	a.mu.Lock()
	f, ok := a.files[ca.Name]
	if !ok || f.CertFile != ca.Spec.KeyStore.File.CertFile || f.KeyFile != ca.Spec.KeyStore.File.KeyFile {
		f = &signing.FileCA{CertFile: ca.Spec.KeyStore.File.CertFile, KeyFile: ca.Spec.KeyStore.File.KeyFile}
		a.files[ca.Name] = f
	}
	a.mu.Unlock()
	cert, signer, err := f.Current()
	if err != nil {
		return nil, err
	}
	return &Authority{Name: ca.Name, KeyID: "file:" + signing.Fingerprint(cert), Cert: cert, Signer: signer}, nil
}

// ParseCertificatePEM parses the first CERTIFICATE block.
func ParseCertificatePEM(s string) (*x509.Certificate, error) {
	block, _ := pem.Decode([]byte(s))
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no CERTIFICATE PEM block")
	}
	return x509.ParseCertificate(block.Bytes)
}
