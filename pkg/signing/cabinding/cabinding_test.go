package cabinding

import (
	"context"
	"errors"
	"testing"

	"rekey.io/rekey/pkg/leaderelection"
	"rekey.io/rekey/test/etcdtest"
)

func stores(t *testing.T) map[string]Store {
	return map[string]Store{"etcd": NewEtcdStore(etcdtest.Start(t), "/rekey.io-private"), "memory": NewMemoryStore()}
}

func TestFirstBindingWins(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if _, err := s.Get(ctx, "ca"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get before any binding: %v", err)
			}
			first := &Binding{CAName: "ca", CAUID: "uid-1", KeyID: "ca-uid1-1", Certificate: []byte{1}}
			got, err := s.Create(ctx, first)
			if err != nil || got.KeyID != "ca-uid1-1" {
				t.Fatalf("Create: %+v %v", got, err)
			}
			// A second creation for the same object (a crash between steps)
			// gets the first binding back.
			got, err = s.Create(ctx, &Binding{CAName: "ca", CAUID: "uid-1", KeyID: "ca-uid1-2", Certificate: []byte{2}})
			if err != nil || got.KeyID != "ca-uid1-1" {
				t.Fatalf("second Create: %+v %v", got, err)
			}
			// A CA made again under the same name replaces the stale binding.
			got, err = s.Create(ctx, &Binding{CAName: "ca", CAUID: "uid-2", KeyID: "ca-uid2-1", Certificate: []byte{3}})
			if err != nil || got.KeyID != "ca-uid2-1" {
				t.Fatalf("Create for a new UID: %+v %v", got, err)
			}
			stored, err := s.Get(ctx, "ca")
			if err != nil || stored.CAUID != "uid-2" {
				t.Fatalf("Get: %+v %v", stored, err)
			}
		})
	}
}

func TestInvalidBindingsAreRefused(t *testing.T) {
	for name, s := range stores(t) {
		for what, b := range map[string]*Binding{
			"key ID leaving the prefix": {CAName: "ca", CAUID: "u", KeyID: "../kek-check", Certificate: []byte{1}},
			"no certificate":            {CAName: "ca", CAUID: "u", KeyID: "k"},
			"no UID":                    {CAName: "ca", KeyID: "k", Certificate: []byte{1}},
			"slash in name":             {CAName: "a/b", CAUID: "u", KeyID: "k", Certificate: []byte{1}},
		} {
			if _, err := s.Create(context.Background(), b); err == nil {
				t.Errorf("%s: %s accepted", name, what)
			}
		}
	}
}

func TestCorruptBindingIsAnError(t *testing.T) {
	client := etcdtest.Start(t)
	ctx := context.Background()
	if _, err := client.Put(ctx, "/rekey.io-private/cabindings/ca", `{"caName":"other","caUID":"u","keyID":"k","certificate":"AQ=="}`); err != nil {
		t.Fatal(err)
	}
	if _, err := NewEtcdStore(client, "/rekey.io-private").Get(ctx, "ca"); err == nil {
		t.Fatal("a binding stored under another CA's name was accepted")
	}
}

// TestReplaceIsACompareAndSwap: a rotation step applies once; a writer
// holding an old view gets ErrConflict.
func TestReplaceIsACompareAndSwap(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			first, err := s.Create(ctx, &Binding{CAName: "ca", CAUID: "u", KeyID: "ca-u-1", Certificate: []byte{1}})
			if err != nil {
				t.Fatal(err)
			}
			rotated := &Binding{CAName: "ca", CAUID: "u", KeyID: "ca-u-2", Certificate: []byte{2}, Generation: 2,
				Previous: &Key{KeyID: "ca-u-1", Certificate: []byte{1}}}
			if err := s.Replace(ctx, first, rotated); err != nil {
				t.Fatal(err)
			}
			if err := s.Replace(ctx, first, &Binding{CAName: "ca", CAUID: "u", KeyID: "ca-u-3", Certificate: []byte{3}}); !errors.Is(err, ErrConflict) {
				t.Fatalf("a stale Replace: %v, want ErrConflict", err)
			}
			got, err := s.Get(ctx, "ca")
			if err != nil || got.KeyID != "ca-u-2" || got.Gen() != 2 || got.Previous == nil || got.Previous.KeyID != "ca-u-1" {
				t.Fatalf("stored %+v %v", got, err)
			}
			if err := s.Replace(ctx, got, &Binding{CAName: "ca", CAUID: "u", KeyID: "ca-u-2", Certificate: []byte{2}, Generation: 2,
				Previous: &Key{KeyID: "../kek-check", Certificate: []byte{1}}}); err == nil {
				t.Fatal("a previous key ID leaving the prefix was stored")
			}
		})
	}
}

// TestWritesOfAnEndedLeadershipTermAreRefused: the CA controller writes
// bindings on the leader; a write whose context belongs to a term that no
// longer leads (its lease deadline passed) is refused as it is sent, and
// nothing changes in etcd.
func TestWritesOfAnEndedLeadershipTermAreRefused(t *testing.T) {
	s := NewEtcdStore(etcdtest.Start(t), "/rekey.io-private")
	ended := leaderelection.WithFence(context.Background(), leaderelection.NewFence()) // no term: not leading
	first := &Binding{CAName: "ca", CAUID: "uid-1", KeyID: "ca-uid1-1", Certificate: []byte{1}}
	if _, err := s.Create(ended, first); !errors.Is(err, leaderelection.ErrNotLeading) {
		t.Fatalf("Create in an ended term: %v, want ErrNotLeading", err)
	}
	if _, err := s.Get(context.Background(), "ca"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused Create stored a binding: %v", err)
	}
	if _, err := s.Create(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	next := *first
	next.KeyID = "ca-uid1-2"
	if err := s.Replace(ended, first, &next); !errors.Is(err, leaderelection.ErrNotLeading) {
		t.Fatalf("Replace in an ended term: %v, want ErrNotLeading", err)
	}
	if b, err := s.Get(context.Background(), "ca"); err != nil || b.KeyID != "ca-uid1-1" {
		t.Fatalf("after a refused Replace: %+v %v", b, err)
	}
}
