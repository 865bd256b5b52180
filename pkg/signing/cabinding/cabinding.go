// Package cabinding records, in storage the API does not serve, which key
// each CertificateAuthority signs with and the certificate that goes with
// it. The signer reads the key from here and never from the object's
// status: status is what clients see, and a status that named the key
// would let whoever could write it hand a CA another CA's key.
package cabinding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"rekey.io/rekey/pkg/leaderelection"
	"rekey.io/rekey/pkg/signing"
)

// ErrNotFound is returned for a CA that has no binding yet.
var ErrNotFound = errors.New("no key is bound to this CertificateAuthority yet")

// Binding is one CA's key and certificate.
type Binding struct {
	// CAName and CAUID identify the object; a CA deleted and created again
	// under the same name has another UID and is not bound to the old key.
	CAName string `json:"caName"`
	CAUID  string `json:"caUID"`
	// KeyID names the key in the CA's key store; the server derives it.
	KeyID string `json:"keyID"`
	// Certificate is the DER of the CA certificate for that key.
	Certificate []byte `json:"certificate"`
	// Generation counts the CA's keys: 1 for the first, one more for each
	// rotation (0 in bindings written before rotation existed means 1).
	Generation int `json:"generation,omitempty"`
	// Previous is the key being rotated out: set when a rotation's new key
	// starts to sign, cleared once the old key is destroyed. Nothing signs
	// with it.
	Previous *Key `json:"previous,omitempty"`
	// Next is a rotation's new key while it is being trusted (Preparing):
	// published beside the current one, it signs nothing until it is
	// promoted to current (Prepared).
	Next *Key `json:"next,omitempty"`
}

// Key is a key ID and its CA certificate.
type Key struct {
	KeyID       string `json:"keyID"`
	Certificate []byte `json:"certificate"`
}

// Gen returns the generation, counting an unset one as 1.
func (b *Binding) Gen() int {
	if b.Generation < 1 {
		return 1
	}
	return b.Generation
}

// ErrConflict is returned by Replace when the stored binding is not the
// expected one.
var ErrConflict = errors.New("the CA key binding changed meanwhile")

// Store keeps bindings.
type Store interface {
	// Get returns the binding of the CA named caName, or ErrNotFound.
	Get(ctx context.Context, caName string) (*Binding, error)
	// Create stores b unless the CA already has a binding for the same UID,
	// and returns the binding in force: after a crash between two steps,
	// the first binding made wins and no CA ends up with two.
	Create(ctx context.Context, b *Binding) (*Binding, error)
	// Replace stores next if the stored binding is still expected (a
	// compare-and-swap), else returns ErrConflict: each rotation step
	// happens once even if two writers race or one retries after a crash.
	Replace(ctx context.Context, expected, next *Binding) error
}

func validate(b *Binding) error {
	if b.CAName == "" || b.CAUID == "" || len(b.Certificate) == 0 {
		return errors.New("incomplete CA key binding")
	}
	if strings.Contains(b.CAName, "/") {
		return fmt.Errorf("invalid CertificateAuthority name %q", b.CAName)
	}
	for _, k := range []*Key{b.Previous, b.Next} {
		if k == nil {
			continue
		}
		if err := signing.ValidateKeyID(k.KeyID); err != nil {
			return err
		}
	}
	return signing.ValidateKeyID(b.KeyID)
}

func same(a, b *Binding) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// EtcdStore keeps bindings under <prefix>/cabindings/<CA name>. Its writes
// are the CA controller's, on the elected leader: each checks, as it is
// sent, that the leadership term its context belongs to (if any) still
// holds (leaderelection.CheckContext).
type EtcdStore struct {
	client *clientv3.Client
	prefix string
}

// NewEtcdStore returns a store under the private prefix.
func NewEtcdStore(client *clientv3.Client, prefix string) *EtcdStore {
	return &EtcdStore{client: client, prefix: strings.TrimSuffix(prefix, "/")}
}

func (s *EtcdStore) key(caName string) string { return path.Join(s.prefix, "cabindings", caName) }

// Get implements Store.
func (s *EtcdStore) Get(ctx context.Context, caName string) (*Binding, error) {
	if strings.Contains(caName, "/") || caName == "" {
		return nil, fmt.Errorf("invalid CertificateAuthority name %q", caName)
	}
	resp, err := s.client.Get(ctx, s.key(caName))
	if err != nil {
		return nil, fmt.Errorf("reading the key binding of CertificateAuthority %s: %w", caName, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, ErrNotFound
	}
	return decode(caName, resp.Kvs[0].Value)
}

func decode(caName string, data []byte) (*Binding, error) {
	var b Binding
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("the key binding of CertificateAuthority %s is corrupt", caName)
	}
	if b.CAName != caName {
		return nil, fmt.Errorf("the key binding stored for CertificateAuthority %s names %s", caName, b.CAName)
	}
	if err := validate(&b); err != nil {
		return nil, fmt.Errorf("the key binding of CertificateAuthority %s is invalid: %w", caName, err)
	}
	return &b, nil
}

// KeyGuard reads the binding of caName and says whether it lists keyID
// (as the current, previous or next key), with the comparison that holds
// while the binding is the one read: a transaction conditioned on it
// commits only if the key is still bound. Completing a rotation drops the
// previous key from the binding, whatever store held the key.
func (s *EtcdStore) KeyGuard(ctx context.Context, caName, keyID string) (cmp clientv3.Cmp, bound bool, err error) {
	if strings.Contains(caName, "/") || caName == "" {
		return clientv3.Cmp{}, false, fmt.Errorf("invalid CertificateAuthority name %q", caName)
	}
	resp, err := s.client.Get(ctx, s.key(caName))
	if err != nil {
		return clientv3.Cmp{}, false, fmt.Errorf("reading the key binding of CertificateAuthority %s: %w", caName, err)
	}
	if len(resp.Kvs) == 0 {
		return clientv3.Cmp{}, false, nil
	}
	b, err := decode(caName, resp.Kvs[0].Value)
	if err != nil {
		return clientv3.Cmp{}, false, err
	}
	bound = b.KeyID == keyID || b.Previous != nil && b.Previous.KeyID == keyID || b.Next != nil && b.Next.KeyID == keyID
	return clientv3.Compare(clientv3.ModRevision(s.key(caName)), "=", resp.Kvs[0].ModRevision), bound, nil
}

// Create implements Store with one transaction: write if there is no
// binding or the stored one is for another UID (a CA deleted and made
// again); else return the stored one.
func (s *EtcdStore) Create(ctx context.Context, b *Binding) (*Binding, error) {
	if err := validate(b); err != nil {
		return nil, err
	}
	data, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	key := s.key(b.CAName)
	for attempt := 0; attempt < 5; attempt++ {
		cur, err := s.client.Get(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("reading the key binding of CertificateAuthority %s: %w", b.CAName, err)
		}
		modRev := int64(0)
		if len(cur.Kvs) > 0 {
			existing, err := decode(b.CAName, cur.Kvs[0].Value)
			if err == nil && existing.CAUID == b.CAUID {
				return existing, nil
			}
			modRev = cur.Kvs[0].ModRevision
		}
		if err := leaderelection.CheckContext(ctx, leaderelection.TargetEtcd); err != nil {
			return nil, fmt.Errorf("storing the key binding of CertificateAuthority %s: %w", b.CAName, err)
		}
		resp, err := s.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).
			Then(clientv3.OpPut(key, string(data))).
			Commit()
		if err != nil {
			return nil, fmt.Errorf("storing the key binding of CertificateAuthority %s: %w", b.CAName, err)
		}
		if resp.Succeeded {
			return b, nil
		}
	}
	return nil, fmt.Errorf("storing the key binding of CertificateAuthority %s: too many concurrent writers", b.CAName)
}

// Replace implements Store.
func (s *EtcdStore) Replace(ctx context.Context, expected, next *Binding) error {
	if err := validate(next); err != nil {
		return err
	}
	data, err := json.Marshal(next)
	if err != nil {
		return err
	}
	key := s.key(expected.CAName)
	cur, err := s.client.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading the key binding of CertificateAuthority %s: %w", expected.CAName, err)
	}
	if len(cur.Kvs) == 0 {
		return ErrConflict
	}
	stored, err := decode(expected.CAName, cur.Kvs[0].Value)
	if err != nil {
		return err
	}
	if !same(stored, expected) {
		return ErrConflict
	}
	if err := leaderelection.CheckContext(ctx, leaderelection.TargetEtcd); err != nil {
		return fmt.Errorf("storing the key binding of CertificateAuthority %s: %w", expected.CAName, err)
	}
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", cur.Kvs[0].ModRevision)).
		Then(clientv3.OpPut(key, string(data))).
		Commit()
	if err != nil {
		return fmt.Errorf("storing the key binding of CertificateAuthority %s: %w", expected.CAName, err)
	}
	if !resp.Succeeded {
		return ErrConflict
	}
	return nil
}

// MemoryStore is a Store in memory, for tests.
type MemoryStore struct {
	mu       sync.Mutex
	bindings map[string]Binding
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{bindings: map[string]Binding{}} }

// Get implements Store.
func (m *MemoryStore) Get(_ context.Context, caName string) (*Binding, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.bindings[caName]
	if !ok {
		return nil, ErrNotFound
	}
	return &b, nil
}

// Replace implements Store.
func (m *MemoryStore) Replace(_ context.Context, expected, next *Binding) error {
	if err := validate(next); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.bindings[expected.CAName]
	if !ok || !same(&cur, expected) {
		return ErrConflict
	}
	m.bindings[expected.CAName] = *next
	return nil
}

// Create implements Store.
func (m *MemoryStore) Create(_ context.Context, b *Binding) (*Binding, error) {
	if err := validate(b); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.bindings[b.CAName]; ok && cur.CAUID == b.CAUID {
		return &cur, nil
	}
	m.bindings[b.CAName] = *b
	return b, nil
}
