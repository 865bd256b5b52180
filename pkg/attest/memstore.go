package attest

import (
	"context"
	"sync"
	"time"
)

// MemoryStore is a Store in memory, for tests and for a single process.
type MemoryStore struct {
	mu         sync.Mutex
	byEK       map[string]*Binding
	byNode     map[string]*Binding
	challenges map[string]StoredChallenge
	attempts   map[string][]time.Time
	revision   int64
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{byEK: map[string]*Binding{}, byNode: map[string]*Binding{}, challenges: map[string]StoredChallenge{}, attempts: map[string][]time.Time{}}
}

// BindingForEK implements Store.
func (s *MemoryStore) BindingForEK(_ context.Context, fp string) (*Binding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byEK[fp], nil
}

// BindingForNode implements Store.
func (s *MemoryStore) BindingForNode(_ context.Context, node string) (*Binding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byNode[node], nil
}

// Bind implements Store.
func (s *MemoryStore) Bind(_ context.Context, b Binding) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byEK[b.EKFingerprint] != nil || s.byNode[b.Node] != nil {
		return ErrAlreadyBound
	}
	s.byEK[b.EKFingerprint], s.byNode[b.Node] = &b, &b
	return nil
}

// PutChallenge implements Store; a new challenge replaces an outstanding one.
func (s *MemoryStore) PutChallenge(_ context.Context, node string, c StoredChallenge) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revision++
	c.Revision = s.revision
	s.challenges[node] = c
	return nil
}

// GetChallenge implements Store.
func (s *MemoryStore) GetChallenge(_ context.Context, node string) (*StoredChallenge, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.challenges[node]
	if !ok {
		return nil, nil
	}
	return &c, nil
}

// TakeChallenge implements Store.
func (s *MemoryStore) TakeChallenge(_ context.Context, node string, read *StoredChallenge) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.challenges[node]
	if !ok || read == nil || c.Revision != read.Revision {
		return false, nil
	}
	delete(s.challenges, node)
	return true, nil
}

// Attempt implements Store.
func (s *MemoryStore) Attempt(_ context.Context, fp, node string, now time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fp = fp + "/" + node
	kept := s.attempts[fp][:0]
	for _, t := range s.attempts[fp] {
		if now.Sub(t) < time.Hour {
			kept = append(kept, t)
		}
	}
	s.attempts[fp] = append(kept, now)
	return len(s.attempts[fp]), nil
}
