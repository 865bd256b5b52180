// Package etcdstore keeps attestation state (EK-to-node bindings,
// outstanding challenges, attempts) in rekey's private etcd prefix, which
// no API resource maps to: every replica sees the same state, a challenge
// is taken by one request only and an EK binds to one node only.
package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"rekey.io/rekey/pkg/attest"
)

// Store is an attest.Store on etcd.
type Store struct {
	client *clientv3.Client
	prefix string
}

var _ attest.Store = (*Store)(nil)

// New returns a store under <prefix>/attestation.
func New(client *clientv3.Client, prefix string) *Store {
	return &Store{client: client, prefix: path.Join(prefix, "attestation")}
}

// Names (node names, hex fingerprints) are checked by the callers; they
// are used as key segments only after path.Base gives them back unchanged.
func (s *Store) key(kind, name string) (string, error) {
	if name == "" || path.Base(name) != name || name == "." || name == ".." {
		return "", fmt.Errorf("invalid %s name %q", kind, name)
	}
	return path.Join(s.prefix, kind, name), nil
}

func (s *Store) getBinding(ctx context.Context, kind, name string) (*attest.Binding, error) {
	k, err := s.key(kind, name)
	if err != nil {
		return nil, err
	}
	rsp, err := s.client.Get(ctx, k)
	if err != nil {
		return nil, fmt.Errorf("reading attestation binding: %w", err)
	}
	if len(rsp.Kvs) == 0 {
		return nil, nil
	}
	var b attest.Binding
	if err := json.Unmarshal(rsp.Kvs[0].Value, &b); err != nil {
		return nil, fmt.Errorf("decoding attestation binding %s: %w", k, err)
	}
	return &b, nil
}

// BindingForEK implements attest.Store.
func (s *Store) BindingForEK(ctx context.Context, fp string) (*attest.Binding, error) {
	return s.getBinding(ctx, "ek", fp)
}

// BindingForNode implements attest.Store.
func (s *Store) BindingForNode(ctx context.Context, node string) (*attest.Binding, error) {
	return s.getBinding(ctx, "node", node)
}

// Bind implements attest.Store: both keys are created in one transaction
// that fails if either exists.
func (s *Store) Bind(ctx context.Context, b attest.Binding) error {
	ekKey, err := s.key("ek", b.EKFingerprint)
	if err != nil {
		return err
	}
	nodeKey, err := s.key("node", b.Node)
	if err != nil {
		return err
	}
	data, err := json.Marshal(b)
	if err != nil {
		return err
	}
	rsp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(ekKey), "=", 0), clientv3.Compare(clientv3.CreateRevision(nodeKey), "=", 0)).
		Then(clientv3.OpPut(ekKey, string(data)), clientv3.OpPut(nodeKey, string(data))).
		Commit()
	if err != nil {
		return fmt.Errorf("binding EK %s to node %s: %w", b.EKFingerprint, b.Node, err)
	}
	if !rsp.Succeeded {
		return attest.ErrAlreadyBound
	}
	return nil
}

// PutChallenge implements attest.Store; the key expires with the
// challenge (an etcd lease), so abandoned challenges do not pile up.
func (s *Store) PutChallenge(ctx context.Context, node string, c attest.StoredChallenge) error {
	k, err := s.key("challenge", node)
	if err != nil {
		return err
	}
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	ttl := int64(time.Until(c.Expires)/time.Second) + 60
	lease, err := s.client.Grant(ctx, max(ttl, 60))
	if err != nil {
		return fmt.Errorf("storing the challenge: %w", err)
	}
	if _, err := s.client.Put(ctx, k, string(data), clientv3.WithLease(lease.ID)); err != nil {
		return fmt.Errorf("storing the challenge: %w", err)
	}
	return nil
}

// GetChallenge implements attest.Store.
func (s *Store) GetChallenge(ctx context.Context, node string) (*attest.StoredChallenge, error) {
	k, err := s.key("challenge", node)
	if err != nil {
		return nil, err
	}
	rsp, err := s.client.Get(ctx, k)
	if err != nil {
		return nil, fmt.Errorf("reading the challenge: %w", err)
	}
	if len(rsp.Kvs) == 0 {
		return nil, nil
	}
	var c attest.StoredChallenge
	if err := json.Unmarshal(rsp.Kvs[0].Value, &c); err != nil {
		return nil, fmt.Errorf("decoding the challenge: %w", err)
	}
	c.Revision = rsp.Kvs[0].ModRevision
	return &c, nil
}

// TakeChallenge implements attest.Store: one transaction deletes the key
// only while it is still the revision read, so of two requests answering
// one challenge only one takes it, and a challenge that replaced it stays.
func (s *Store) TakeChallenge(ctx context.Context, node string, c *attest.StoredChallenge) (bool, error) {
	k, err := s.key("challenge", node)
	if err != nil {
		return false, err
	}
	if c == nil || c.Revision == 0 {
		return false, nil
	}
	rsp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(k), "=", c.Revision)).
		Then(clientv3.OpDelete(k)).
		Commit()
	if err != nil {
		return false, fmt.Errorf("taking the challenge: %w", err)
	}
	return rsp.Succeeded, nil
}

// Attempt implements attest.Store: one key per attempt under the EK and
// node, expiring after an hour; the count is of the keys still there.
func (s *Store) Attempt(ctx context.Context, fp, node string, now time.Time) (int, error) {
	dir, err := s.key("attempts", fp)
	if err != nil {
		return 0, err
	}
	if node == "" || path.Base(node) != node || node == "." || node == ".." {
		return 0, fmt.Errorf("invalid node name %q", node)
	}
	dir = path.Join(dir, node)
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return 0, err
	}
	lease, err := s.client.Grant(ctx, int64(time.Hour/time.Second))
	if err != nil {
		return 0, fmt.Errorf("counting attempts: %w", err)
	}
	k := path.Join(dir, fmt.Sprintf("%020d-%s", now.UnixNano(), hex.EncodeToString(id[:])))
	if _, err := s.client.Put(ctx, k, "", clientv3.WithLease(lease.ID)); err != nil {
		return 0, fmt.Errorf("counting attempts: %w", err)
	}
	// Keys of attempts more than an hour old, should a lease outlive its
	// TTL briefly, are not counted.
	from := path.Join(dir, fmt.Sprintf("%020d", now.Add(-time.Hour).UnixNano()))
	rsp, err := s.client.Get(ctx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(dir+"/")), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("counting attempts: %w", err)
	}
	if rsp.Count == 0 {
		return 0, errors.New("counting attempts: the attempt just recorded is missing")
	}
	return int(rsp.Count), nil
}
