// Package authority answers, for every part of rekey that signs, which key
// and certificate sign for a CertificateAuthority and where each issuance
// is recorded: Service, built once per server, holds the key stores a CA's
// spec may name, the bindings, the cache of bound keys (Authorities), the
// issuance records and Signing (policy, sign, record).
package authority

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
	"rekey.io/rekey/pkg/signing/keystorepaths"
	"rekey.io/rekey/pkg/strictpem"
)

// KeyStores resolves a CA's keyStore spec to a key store.
type KeyStores struct {
	// Etcd is the encrypted etcd store; nil when no key-encryption key is
	// configured.
	Etcd signing.KeyStore
	// Allowed are the PKCS#11 modules and key-store directories the
	// operator offered; checked again at every load, so that a CA created
	// before an allow-list was narrowed stops loading.
	Allowed keystorepaths.Allowed
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
		p := ks.Pkcs11
		if p == nil {
			return nil, errors.New("keyStore.pkcs11 is missing")
		}
		if err := k.Allowed.CheckModule(p.ModulePath); err != nil {
			return nil, err
		}
		if err := k.Allowed.CheckFileResolved(p.PINFile); err != nil {
			return nil, fmt.Errorf("keyStore.pkcs11.pinFile: %w", err)
		}
		return signing.OpenPKCS11(signing.PKCS11Config{ModulePath: p.ModulePath, TokenLabel: p.TokenLabel, PINFile: p.PINFile})
	default:
		return nil, fmt.Errorf("key store %q holds no generated keys", ks.Type)
	}
}

// fileKeyIDPrefix starts the key ID of a File CA's key, followed by its
// certificate's fingerprint: such a key has no binding.
const fileKeyIDPrefix = "file:"

// Authority is a CA ready to sign.
type Authority struct {
	Name   string
	UID    string
	KeyID  string
	Cert   *x509.Certificate
	Signer crypto.Signer
}

// Authorities hands out CAs by name. The key and certificate come from
// the CA's binding (package cabinding), never from its status, and are
// cached per CA so that signing does not go back to the store each time.
type Authorities struct {
	Lister   rotationlisters.CertificateAuthorityLister
	Stores   *KeyStores
	Bindings cabinding.Store

	mu    sync.Mutex
	cache map[string]*Authority
	files map[string]*signing.FileCA
}

// NewAuthorities returns an empty cache.
func NewAuthorities(lister rotationlisters.CertificateAuthorityLister, stores *KeyStores, bindings cabinding.Store) *Authorities {
	return &Authorities{Lister: lister, Stores: stores, Bindings: bindings, cache: map[string]*Authority{}, files: map[string]*signing.FileCA{}}
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
	// While a rotation is Preparing the binding's current key is still the
	// old one: it signs until the new CA is trusted everywhere and the
	// CertificateAuthority controller promotes the new key (Prepared). The
	// new key (the binding's Next) is never handed out here.
	// The status fingerprint only says when to look at the binding again
	// (after a rotation, on another replica): what is signed with always
	// comes from the binding.
	published := ""
	if ca.Status.Current != nil {
		published = ca.Status.Current.Fingerprint
	}
	a.mu.Lock()
	cached, ok := a.cache[name]
	a.mu.Unlock()
	if ok && cached.UID == string(ca.UID) && (published == "" || published == signing.Fingerprint(cached.Cert)) {
		return cached, nil
	}
	b, err := a.Bindings.Get(ctx, name)
	if errors.Is(err, cabinding.ErrNotFound) || err == nil && b.CAUID != string(ca.UID) {
		return nil, fmt.Errorf("CertificateAuthority %q has no key yet", name)
	}
	if err != nil {
		return nil, err
	}
	auth, err := a.load(ctx, ca, b)
	if err != nil {
		return nil, fmt.Errorf("CertificateAuthority %q: %w", name, err)
	}
	a.mu.Lock()
	a.cache[name] = auth
	a.mu.Unlock()
	return auth, nil
}

// Forget drops a CA from the cache, after its binding changed or it was
// deleted.
func (a *Authorities) Forget(name string) {
	a.mu.Lock()
	delete(a.cache, name)
	delete(a.files, name)
	a.mu.Unlock()
}

func (a *Authorities) load(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority, b *cabinding.Binding) (*Authority, error) {
	store, err := a.Stores.For(ca.Spec.KeyStore)
	if err != nil {
		return nil, err
	}
	signer, err := store.Get(ctx, b.KeyID)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(b.Certificate)
	if err != nil {
		return nil, errors.New("the bound CA certificate does not parse")
	}
	if !signing.PublicKeysEqual(cert.PublicKey, signer.Public()) {
		return nil, fmt.Errorf("key %s does not belong to the bound CA certificate", b.KeyID)
	}
	return &Authority{Name: ca.Name, UID: string(ca.UID), KeyID: b.KeyID, Cert: cert, Signer: signer}, nil
}

func (a *Authorities) fromFiles(ca *rotationv1alpha1.CertificateAuthority) (*Authority, error) {
	f := ca.Spec.KeyStore.File
	if f == nil {
		return nil, errors.New("keyStore.file is missing")
	}
	for _, p := range []string{f.CertFile, f.KeyFile} {
		if err := a.Stores.Allowed.CheckFileResolved(p); err != nil {
			return nil, fmt.Errorf("keyStore.file: %w", err)
		}
	}
	a.mu.Lock()
	fc, ok := a.files[ca.Name]
	if !ok || fc.CertFile != f.CertFile || fc.KeyFile != f.KeyFile {
		fc = &signing.FileCA{CertFile: f.CertFile, KeyFile: f.KeyFile}
		a.files[ca.Name] = fc
	}
	a.mu.Unlock()
	cert, signer, err := fc.Current()
	if err != nil {
		return nil, err
	}
	return &Authority{Name: ca.Name, UID: string(ca.UID), KeyID: fileKeyIDPrefix + signing.Fingerprint(cert), Cert: cert, Signer: signer}, nil
}

// ParseCertificatePEM parses a published CA certificate: exactly one
// CERTIFICATE block.
func ParseCertificatePEM(s string) (*x509.Certificate, error) {
	certs, err := strictpem.Certificates([]byte(s), 1)
	if err != nil {
		return nil, err
	}
	return certs[0], nil
}
