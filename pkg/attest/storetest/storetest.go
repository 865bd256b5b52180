// Package storetest checks an attest.Store implementation against what the
// Verifier relies on.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rekey.io/rekey/pkg/attest"
)

// Run checks a fresh store from newStore.
func Run(t *testing.T, newStore func(t *testing.T) attest.Store) {
	ctx := context.Background()
	now := time.Now()

	t.Run("bind once", func(t *testing.T) {
		s := newStore(t)
		b := attest.Binding{Node: "n1", EKFingerprint: "aa", PCRs: map[int][]byte{7: {7}}}
		if err := s.Bind(ctx, b); err != nil {
			t.Fatal(err)
		}
		for name, again := range map[string]attest.Binding{
			"same EK, other node": {Node: "n2", EKFingerprint: "aa"},
			"same node, other EK": {Node: "n1", EKFingerprint: "bb"},
		} {
			if err := s.Bind(ctx, again); !errors.Is(err, attest.ErrAlreadyBound) {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if got, _ := s.BindingForNode(ctx, "n2"); got != nil {
			t.Fatal("a refused binding left a record")
		}
		got, err := s.BindingForEK(ctx, "aa")
		if err != nil || got == nil || got.Node != "n1" || !bytes.Equal(got.PCRs[7], []byte{7}) {
			t.Fatalf("binding for EK: %+v %v", got, err)
		}
		if got, _ := s.BindingForNode(ctx, "n1"); got == nil || got.EKFingerprint != "aa" {
			t.Fatalf("binding for node: %+v", got)
		}
	})

	t.Run("a challenge is read without being taken, and taken once", func(t *testing.T) {
		s := newStore(t)
		c := attest.StoredChallenge{SecretHash: []byte{1}, AKPublic: []byte{2}, EKFingerprint: "aa", Expires: now.Add(time.Minute).Truncate(time.Second)}
		if err := s.PutChallenge(ctx, "n1", c); err != nil {
			t.Fatal(err)
		}
		read, err := s.GetChallenge(ctx, "n1")
		if err != nil || read == nil || !bytes.Equal(read.SecretHash, c.SecretHash) || !read.Expires.Equal(c.Expires) {
			t.Fatalf("read %+v %v", read, err)
		}
		if again, _ := s.GetChallenge(ctx, "n1"); again == nil {
			t.Fatal("reading the challenge took it")
		}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				took, err := s.TakeChallenge(ctx, "n1", read)
				if err != nil {
					t.Error(err)
				}
				if took {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d requests took the challenge", wins.Load())
		}
		if got, _ := s.GetChallenge(ctx, "n1"); got != nil {
			t.Fatalf("taken, still there: %+v", got)
		}
	})

	t.Run("a replaced challenge is not taken in place of the one read", func(t *testing.T) {
		s := newStore(t)
		first := attest.StoredChallenge{SecretHash: []byte{1}, Expires: now.Add(time.Minute)}
		second := attest.StoredChallenge{SecretHash: []byte{2}, Expires: now.Add(time.Minute)}
		_ = s.PutChallenge(ctx, "n1", first)
		read, _ := s.GetChallenge(ctx, "n1")
		_ = s.PutChallenge(ctx, "n1", second)
		if took, err := s.TakeChallenge(ctx, "n1", read); took || err != nil {
			t.Fatalf("took the replacement with the old challenge: %v %v", took, err)
		}
		if got, _ := s.GetChallenge(ctx, "n1"); got == nil || !bytes.Equal(got.SecretHash, []byte{2}) {
			t.Fatalf("the replacement: %+v", got)
		}
		if got, _ := s.GetChallenge(ctx, "n2"); got != nil {
			t.Fatalf("a node without a challenge: %+v", got)
		}
	})

	t.Run("attempts are counted per EK and node", func(t *testing.T) {
		s := newStore(t)
		for i := 1; i <= 3; i++ {
			if n, err := s.Attempt(ctx, "aa", "n1", now); err != nil || n != i {
				t.Fatalf("attempt %d counted %d (%v)", i, n, err)
			}
		}
		if n, _ := s.Attempt(ctx, "bb", "n1", now); n != 1 {
			t.Fatalf("another EK's first attempt counted %d", n)
		}
		if n, _ := s.Attempt(ctx, "aa", "n2", now); n != 1 {
			t.Fatalf("the EK's first attempt for another node counted %d", n)
		}
	})
}
