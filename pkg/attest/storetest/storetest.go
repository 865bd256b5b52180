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

	t.Run("a challenge is taken once", func(t *testing.T) {
		s := newStore(t)
		c := attest.StoredChallenge{SecretHash: []byte{1}, AKPublic: []byte{2}, EKFingerprint: "aa", Expires: now.Add(time.Minute).Truncate(time.Second)}
		if err := s.PutChallenge(ctx, "n1", c); err != nil {
			t.Fatal(err)
		}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := s.TakeChallenge(ctx, "n1")
				if err != nil {
					t.Error(err)
				}
				if got != nil {
					wins.Add(1)
					if !bytes.Equal(got.SecretHash, c.SecretHash) || !got.Expires.Equal(c.Expires) {
						t.Errorf("took %+v", got)
					}
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d requests took the challenge", wins.Load())
		}
	})

	t.Run("attempts are counted per EK", func(t *testing.T) {
		s := newStore(t)
		for i := 1; i <= 3; i++ {
			if n, err := s.Attempt(ctx, "aa", now); err != nil || n != i {
				t.Fatalf("attempt %d counted %d (%v)", i, n, err)
			}
		}
		if n, _ := s.Attempt(ctx, "bb", now); n != 1 {
			t.Fatalf("another EK's first attempt counted %d", n)
		}
	})
}
