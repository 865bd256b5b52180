package signing

import (
	"context"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"rekey.io/rekey/pkg/leaderelection"
)

// KEKSize is the size of the key-encryption key: AES-256.
const KEKSize = 32

const (
	kekCheckKey       = "kek-check"
	kekCheckPlaintext = "rekey key-encryption key check v1"
)

// LoadKEK reads a key-encryption key file: 32 raw bytes, or their base64 or
// hex encoding on one line.
func LoadKEK(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading key-encryption key: %w", err)
	}
	return ParseKEK(data, "file "+path)
}

// ParseKEK reads a key-encryption key: 32 raw bytes, or their base64 or hex
// encoding on one line. source names where it came from in the error, which
// never quotes the data.
func ParseKEK(data []byte, source string) ([]byte, error) {
	if len(data) == KEKSize {
		return data, nil
	}
	text := strings.TrimSpace(string(data))
	if b, err := base64.StdEncoding.DecodeString(text); err == nil && len(b) == KEKSize {
		return b, nil
	}
	if b, err := hex.DecodeString(text); err == nil && len(b) == KEKSize {
		return b, nil
	}
	return nil, fmt.Errorf("key-encryption key %s must hold %d bytes (raw, base64 or hex)", source, KEKSize)
}

// NewKEK returns a fresh random key-encryption key.
func NewKEK() ([]byte, error) {
	kek := make([]byte, KEKSize)
	_, err := rand.Read(kek)
	return kek, err
}

// EtcdKeyStore keeps keys in etcd under a private prefix that no API
// resource maps to, each encrypted with AES-256-GCM under the
// key-encryption key, with the etcd key as additional data so a ciphertext
// cannot be moved to another key ID.
type EtcdKeyStore struct {
	client *clientv3.Client
	prefix string
	aead   cipher.AEAD
}

// sealedKey is what is stored: no plaintext key material.
type sealedKey struct {
	Version    int    `json:"v"`
	Algorithm  string `json:"alg"`
	Nonce      []byte `json:"nonce"`
	Ciphertext []byte `json:"ct"`
}

// NewEtcdKeyStore returns a store under prefix (e.g. "/rekey.io-private").
// It checks the key-encryption key against the one used before (stored as
// an encrypted check value on first use) and fails, changing nothing, if it
// differs.
func NewEtcdKeyStore(ctx context.Context, client *clientv3.Client, prefix string, kek []byte) (*EtcdKeyStore, error) {
	if len(kek) != KEKSize {
		return nil, fmt.Errorf("key-encryption key must be %d bytes, got %d", KEKSize, len(kek))
	}
	block, err := aes.NewCipher(kek)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	s := &EtcdKeyStore{client: client, prefix: strings.TrimSuffix(prefix, "/"), aead: aead}
	if err := s.checkKEK(ctx, kek); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *EtcdKeyStore) checkKEK(ctx context.Context, kek []byte) error {
	key := s.prefix + "/" + kekCheckKey
	sealed, err := s.seal(key, "check", []byte(kekCheckPlaintext))
	if err != nil {
		return err
	}
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(sealed))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("checking the key-encryption key in etcd: %w", err)
	}
	if resp.Succeeded {
		return nil
	}
	stored := resp.Responses[0].GetResponseRange().Kvs[0].Value
	_, plain, err := s.open(key, stored)
	if err != nil || subtle.ConstantTimeCompare(plain, []byte(kekCheckPlaintext)) != 1 {
		sum := sha256.Sum256(kek)
		return fmt.Errorf("the key-encryption key (SHA-256 %x...) is not the one the CA keys in etcd were encrypted with; refusing to start so nothing is overwritten", sum[:4])
	}
	return nil
}

// keyPath is where a key is stored. The ID is validated first, so that no
// ID reaches another etcd key under the private prefix (such as the
// key-encryption key check value).
func (s *EtcdKeyStore) keyPath(keyID string) (string, error) {
	if err := ValidateKeyID(keyID); err != nil {
		return "", err
	}
	return path.Join(s.prefix, "cakeys", keyID), nil
}

func (s *EtcdKeyStore) seal(etcdKey, alg string, plaintext []byte) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return json.Marshal(sealedKey{Version: 1, Algorithm: alg, Nonce: nonce, Ciphertext: s.aead.Seal(nil, nonce, plaintext, []byte(etcdKey))})
}

func (s *EtcdKeyStore) open(etcdKey string, data []byte) (string, []byte, error) {
	var sk sealedKey
	if err := json.Unmarshal(data, &sk); err != nil {
		return "", nil, fmt.Errorf("stored key %s is corrupt", etcdKey)
	}
	if len(sk.Nonce) != s.aead.NonceSize() {
		return "", nil, fmt.Errorf("stored key %s is corrupt: bad nonce", etcdKey)
	}
	plain, err := s.aead.Open(nil, sk.Nonce, sk.Ciphertext, []byte(etcdKey))
	if err != nil {
		return "", nil, fmt.Errorf("cannot decrypt %s: wrong key-encryption key or tampered data", etcdKey)
	}
	return sk.Algorithm, plain, nil
}

// GetOrCreate implements KeyStore. The key is generated in memory, sealed,
// and written only if no key exists under the ID (an etcd transaction), so
// two callers racing get the same key.
func (s *EtcdKeyStore) GetOrCreate(ctx context.Context, keyID string, alg Algorithm) (crypto.Signer, bool, error) {
	if signer, err := s.Get(ctx, keyID); err == nil {
		return signer, false, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, false, err
	}
	etcdKey, err := s.keyPath(keyID)
	if err != nil {
		return nil, false, err
	}
	key, err := GenerateKey(alg)
	if err != nil {
		return nil, false, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, false, fmt.Errorf("encoding new key: %w", err)
	}
	sealed, err := s.seal(etcdKey, string(alg), der)
	clear(der)
	if err != nil {
		return nil, false, err
	}
	// Keys are made and destroyed by the CA controller on the leader: a
	// write of a leadership term that ended is refused as it is sent.
	if err := leaderelection.CheckContext(ctx, leaderelection.TargetEtcd); err != nil {
		return nil, false, fmt.Errorf("storing key %s: %w", keyID, err)
	}
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(etcdKey), "=", 0)).
		Then(clientv3.OpPut(etcdKey, string(sealed))).
		Commit()
	if err != nil {
		return nil, false, fmt.Errorf("storing key %s: %w", keyID, err)
	}
	if !resp.Succeeded {
		signer, err := s.Get(ctx, keyID)
		return signer, false, err
	}
	return key, true, nil
}

// Get implements KeyStore.
func (s *EtcdKeyStore) Get(ctx context.Context, keyID string) (crypto.Signer, error) {
	etcdKey, err := s.keyPath(keyID)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Get(ctx, etcdKey)
	if err != nil {
		return nil, fmt.Errorf("reading key %s: %w", keyID, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, keyID)
	}
	alg, der, err := s.open(etcdKey, resp.Kvs[0].Value)
	if err != nil {
		return nil, err
	}
	defer clear(der)
	if !knownAlgorithm(Algorithm(alg)) {
		return nil, fmt.Errorf("stored key %s is not a CA key", keyID)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		// The parser's error can quote the decrypted bytes: never pass it on.
		return nil, fmt.Errorf("stored key %s does not parse as a PKCS#8 private key", keyID)
	}
	signer, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("stored key %s cannot sign", keyID)
	}
	return signer, nil
}

// KeyGuard says whether key keyID exists in the store, with the
// comparison that holds while it still does (the same entry: its create
// revision): a transaction conditioned on it commits only if the key was
// not destroyed meanwhile.
func (s *EtcdKeyStore) KeyGuard(ctx context.Context, keyID string) (cmp clientv3.Cmp, exists bool, err error) {
	if s == nil {
		return clientv3.Cmp{}, false, errors.New("the Etcd key store is not configured")
	}
	etcdKey, err := s.keyPath(keyID)
	if err != nil {
		return clientv3.Cmp{}, false, err
	}
	resp, err := s.client.Get(ctx, etcdKey, clientv3.WithKeysOnly())
	if err != nil {
		return clientv3.Cmp{}, false, fmt.Errorf("reading key %s: %w", keyID, err)
	}
	if len(resp.Kvs) == 0 {
		return clientv3.Cmp{}, false, nil
	}
	return clientv3.Compare(clientv3.CreateRevision(etcdKey), "=", resp.Kvs[0].CreateRevision), true, nil
}

// Delete implements KeyStore.
func (s *EtcdKeyStore) Delete(ctx context.Context, keyID string) error {
	etcdKey, err := s.keyPath(keyID)
	if err != nil {
		return err
	}
	if err := leaderelection.CheckContext(ctx, leaderelection.TargetEtcd); err != nil {
		return fmt.Errorf("destroying key %s: %w", keyID, err)
	}
	_, err = s.client.Delete(ctx, etcdKey)
	return err
}
