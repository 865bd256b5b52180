// Package agent is rekey-agent's certificate manager: it keeps a node's
// client (and serving) certificate in a directory, bootstraps it through
// certificates.rekey.io, and renews it before it expires, as the kubelet's
// certificate manager does against certificates.k8s.io.
package agent

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/strictpem"
)

// Prefixes of the files a Store keeps, as the kubelet names its own.
const (
	PrefixClient = "rekey-client"
	PrefixServer = "rekey-server"
)

// maxPairBytes bounds what is read from a pair file before parsing.
const maxPairBytes = 256 << 10

// ErrNoCertificate means the store holds no current pair.
var ErrNoCertificate = errors.New("no current certificate")

// Store keeps certificate and key pairs in Dir: each pair in
// <prefix>-<timestamp>.pem (certificate chain, then the PKCS#8 key; mode
// 0600), the one in use named by the symlink <prefix>-current.pem, which is
// replaced by a rename so that a reader always finds a whole pair. The key
// of a request not yet answered waits in <prefix>.key.tmp.
type Store struct {
	Dir    string
	Prefix string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// CurrentPath is the symlink to the pair in use.
func (s *Store) CurrentPath() string { return filepath.Join(s.Dir, s.Prefix+"-current.pem") }

func (s *Store) pendingKeyPath() string { return filepath.Join(s.Dir, s.Prefix+".key.tmp") }

// Current returns the pair in use, with its leaf parsed. A pair that does
// not parse, whose key is not the certificate's, or whose certificate has
// expired (or is not valid yet) is an error: it is never used.
func (s *Store) Current() (*tls.Certificate, error) {
	data, err := readCapped(s.CurrentPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoCertificate
	}
	if err != nil {
		return nil, err
	}
	pair, err := parsePair(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.CurrentPath(), err)
	}
	now := s.now()
	if now.After(pair.Leaf.NotAfter) || now.Before(pair.Leaf.NotBefore) {
		return nil, fmt.Errorf("%s: the certificate is valid from %s to %s, not now", s.CurrentPath(),
			pair.Leaf.NotBefore.UTC().Format(time.RFC3339), pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return pair, nil
}

// parsePair reads certificate blocks followed by one PKCS#8 key block.
func parsePair(data []byte) (*tls.Certificate, error) {
	blocks, err := strictpem.Decode(data, 17)
	if err != nil {
		return nil, err
	}
	if len(blocks) < 2 || blocks[len(blocks)-1].Type != "PRIVATE KEY" {
		return nil, errors.New("must hold the certificate chain and then one PRIVATE KEY block")
	}
	pair := &tls.Certificate{}
	for _, b := range blocks[:len(blocks)-1] {
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("unexpected %q block before the key", b.Type)
		}
		pair.Certificate = append(pair.Certificate, b.Bytes)
	}
	if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
		return nil, errors.New("the certificate does not parse")
	}
	key, err := x509.ParsePKCS8PrivateKey(blocks[len(blocks)-1].Bytes)
	if err != nil {
		return nil, errors.New("the private key does not parse")
	}
	signer, ok := key.(crypto.Signer)
	if !ok || !signing.PublicKeysEqual(signer.Public(), pair.Leaf.PublicKey) {
		return nil, errors.New("the private key is not the certificate's")
	}
	pair.PrivateKey = signer
	return pair, nil
}

// Update stores a new pair and makes it current: the pair file is written
// and synced first, then the symlink is replaced by a rename, so a crash at
// any point leaves either the old current pair or the new one.
func (s *Store) Update(certPEM []byte, key crypto.Signer) (string, error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", fmt.Errorf("encoding the private key: %w", err)
	}
	data := append(append([]byte(nil), certPEM...), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})...)
	if _, err := parsePair(data); err != nil {
		return "", fmt.Errorf("refusing to store the pair: %w", err)
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s-%s.pem", s.Prefix, s.now().UTC().Format("2006-01-02-15-04-05.000000000"))
	path := filepath.Join(s.Dir, name)
	if err := writeFileSynced(path, data, 0o600); err != nil {
		return "", err
	}
	link := s.CurrentPath() + ".tmp"
	_ = os.Remove(link)
	if err := os.Symlink(name, link); err != nil {
		return "", fmt.Errorf("linking the new pair: %w", err)
	}
	reached(StepSwap)
	if err := os.Rename(link, s.CurrentPath()); err != nil {
		return "", fmt.Errorf("making the new pair current: %w", err)
	}
	return path, syncDir(s.Dir)
}

// PendingKey returns the key that waits for a certificate, making (and
// storing, mode 0600) an ECDSA P-256 key when there is none, so that a
// restarted agent asks for the same key again.
func (s *Store) PendingKey() (crypto.Signer, error) {
	data, err := readCapped(s.pendingKeyPath())
	if err == nil {
		key, perr := signing.ParsePrivateKeyPEM(data)
		if perr == nil {
			return key, nil
		}
		// A torn or foreign file: a new key costs only a new request.
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return nil, err
	}
	tmp := s.pendingKeyPath() + ".new"
	if err := writeFileSynced(tmp, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, s.pendingKeyPath()); err != nil {
		return nil, err
	}
	return key, syncDir(s.Dir)
}

// DropPendingKey forgets the pending key once its certificate is stored.
func (s *Store) DropPendingKey() error {
	err := os.Remove(s.pendingKeyPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxPairBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxPairBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxPairBytes)
	}
	return data, nil
}

func writeFileSynced(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".partial"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}
