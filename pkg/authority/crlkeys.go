package authority

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
)

// ErrNoSuchKey is the error of KeyIDs and KeyByID for a CA that does not
// exist, has no key yet, or has no key of that ID (any more).
var ErrNoSuchKey = errors.New("no such CertificateAuthority key")

// KeyIDs returns the IDs of the keys a CA's status shows: the current one
// and, during a rotation, the previous one ("" when there is none). A File
// CA's only key is "file:" and its certificate's fingerprint, as Get names
// it. It reads the CA informer's cache only, never a store: whoever asks
// for a CRL without credentials cannot make rekey read etcd for a key
// that does not exist.
func (a *Authorities) KeyIDs(name string) (current, previous string, err error) {
	ca, err := a.Lister.Get(name)
	if err != nil {
		return "", "", fmt.Errorf("CertificateAuthority %q: %w (%w)", name, ErrNoSuchKey, err)
	}
	if ca.Spec.Purpose == rotationv1alpha1.PurposeServiceAccountTokens {
		// It issued no certificate to revoke, and its key signs tokens
		// only: no CRL is signed with it.
		return "", "", fmt.Errorf("CertificateAuthority %q signs service-account tokens, not certificates, and has no CRL: %w", name, ErrNoSuchKey)
	}
	cur, prev := ca.Status.Current, ca.Status.Previous
	if cur == nil {
		return "", "", fmt.Errorf("CertificateAuthority %q has no key yet: %w", name, ErrNoSuchKey)
	}
	if ca.Spec.KeyStore.Type == rotationv1alpha1.KeyStoreFile {
		return fileKeyIDPrefix + cur.Fingerprint, "", nil
	}
	current = cur.KeyID
	if prev != nil {
		previous = prev.KeyID
	}
	return current, previous, nil
}

// KeyByID returns one of a CA's keys that can sign for it, current or
// previous (a rotation's next key signs nothing and is not returned). The
// previous key still exists until the rotation completes and destroys it;
// it signs nothing but its own CRL (package crl), which lists the
// certificates it signed that were revoked. The key comes from the
// binding, as Get's.
func (a *Authorities) KeyByID(ctx context.Context, name, keyID string) (*Authority, error) {
	if err := a.CheckIssuesCertificates(name); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoSuchKey, err)
	}
	if auth, err := a.Get(ctx, name); err == nil && auth.KeyID == keyID {
		return auth, nil
	}
	ca, err := a.Lister.Get(name)
	if err != nil {
		return nil, fmt.Errorf("CertificateAuthority %q: %w (%w)", name, ErrNoSuchKey, err)
	}
	if ca.Spec.KeyStore.Type == rotationv1alpha1.KeyStoreFile {
		return nil, fmt.Errorf("CertificateAuthority %q: key %q: %w", name, keyID, ErrNoSuchKey)
	}
	b, err := a.Bindings.Get(ctx, name)
	if errors.Is(err, cabinding.ErrNotFound) || err == nil && b.CAUID != string(ca.UID) {
		return nil, fmt.Errorf("CertificateAuthority %q has no key yet: %w", name, ErrNoSuchKey)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case b.KeyID == keyID:
		// The cache lags behind a rotation that just promoted this key.
		return a.load(ctx, ca, b)
	case b.Previous != nil && b.Previous.KeyID == keyID:
		store, err := a.Stores.For(ca.Spec.KeyStore)
		if err != nil {
			return nil, err
		}
		signer, err := store.Get(ctx, keyID)
		if err != nil {
			return nil, fmt.Errorf("CertificateAuthority %q: previous key %s: %w", name, keyID, err)
		}
		cert, err := x509.ParseCertificate(b.Previous.Certificate)
		if err != nil {
			return nil, fmt.Errorf("CertificateAuthority %q: the previous CA certificate does not parse", name)
		}
		if !signing.PublicKeysEqual(cert.PublicKey, signer.Public()) {
			return nil, fmt.Errorf("CertificateAuthority %q: key %s does not belong to the previous CA certificate", name, keyID)
		}
		return &Authority{Name: ca.Name, UID: string(ca.UID), KeyID: keyID, Cert: cert, Signer: signer}, nil
	default:
		return nil, fmt.Errorf("CertificateAuthority %q: key %q: %w", name, keyID, ErrNoSuchKey)
	}
}
