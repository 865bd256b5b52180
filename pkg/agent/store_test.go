package agent

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Every name the store writes, reads or renames in its directory, as an
// attacker who could write there would plant it.
func storeNames(s *Store) []string {
	pair := s.Prefix + "-" + s.now().UTC().Format("2006-01-02-15-04-05.000000000") + ".pem"
	return []string{
		s.pendingKeyPath(),
		s.pendingKeyPath() + ".new",
		s.pendingKeyPath() + ".partial",
		s.pendingKeyPath() + ".new.partial",
		filepath.Join(s.Dir, pair),
		filepath.Join(s.Dir, pair+".partial"),
		s.CurrentPath() + ".tmp",
	}
}

// A symlink planted at any name the store writes (its temporary files, the
// pair file, the link it swaps in) is never written through: the file it
// points at, existing or not, is left alone, and the store still works.
func TestStoreNeverWritesThroughAPlantedSymlink(t *testing.T) {
	ca := newCA(t)
	now := time.Now().Truncate(time.Second)
	for _, dangling := range []bool{false, true} {
		for i, name := range storeNames(&Store{Dir: "D", Prefix: PrefixClient, Now: func() time.Time { return now }}) {
			name = filepath.Base(name)
			t.Run(name, func(t *testing.T) {
				dir, outside := t.TempDir(), t.TempDir()
				s := &Store{Dir: dir, Prefix: PrefixClient, Now: func() time.Time { return now }}
				victim := filepath.Join(outside, "victim")
				if !dangling {
					if err := os.WriteFile(victim, []byte("untouched"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.Symlink(victim, filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
				key, err := s.PendingKey()
				if err != nil {
					t.Fatalf("PendingKey with a link at %s (%d): %v", name, i, err)
				}
				if _, err := s.Update(issue(t, ca, key.Public(), "system:node:a", now.Add(-time.Minute), time.Hour), key); err != nil {
					t.Fatalf("Update with a link at %s: %v", name, err)
				}
				got, err := os.ReadFile(victim)
				switch {
				case dangling && !errors.Is(err, os.ErrNotExist):
					t.Fatalf("the store created the file a dangling link at %s points to (%d bytes)", name, len(got))
				case !dangling && string(got) != "untouched":
					t.Fatalf("the store wrote through a link at %s: the file it points to now holds %d bytes", name, len(got))
				}
				if _, err := s.Current(); err != nil {
					t.Fatalf("after the update: %v", err)
				}
			})
		}
	}
}

// A key or pair that a link in the directory points to, outside it, is
// never used: a planted pending key would be a key the attacker knows.
func TestStoreNeverReadsKeysThroughAPlantedSymlink(t *testing.T) {
	ca := newCA(t)
	outside := t.TempDir()
	known := newKey(t)
	der, err := x509.MarshalPKCS8PrivateKey(known)
	if err != nil {
		t.Fatal(err)
	}
	knownKey := filepath.Join(outside, "known.key")
	if err := os.WriteFile(knownKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("pending key", func(t *testing.T) {
		s := &Store{Dir: t.TempDir(), Prefix: PrefixClient}
		if err := os.Symlink(knownKey, s.pendingKeyPath()); err != nil {
			t.Fatal(err)
		}
		key, err := s.PendingKey()
		if err == nil && key.(*ecdsa.PrivateKey).Equal(known) {
			t.Fatal("the pending key is the one a planted link points to")
		}
	})

	t.Run("current pair outside the directory", func(t *testing.T) {
		s := &Store{Dir: t.TempDir(), Prefix: PrefixClient}
		elsewhere := &Store{Dir: t.TempDir(), Prefix: PrefixClient}
		path, err := elsewhere.Update(issue(t, ca, &known.PublicKey, "system:node:a", time.Now().Add(-time.Minute), time.Hour), known)
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range []string{path, filepath.Join("..", filepath.Base(elsewhere.Dir), filepath.Base(path))} {
			_ = os.Remove(s.CurrentPath())
			if err := os.Symlink(target, s.CurrentPath()); err != nil {
				t.Fatal(err)
			}
			if pair, err := s.Current(); err == nil {
				t.Fatalf("Current used %s, outside the directory (key %T)", target, pair.PrivateKey)
			}
		}
	})

	t.Run("current pair through a second link", func(t *testing.T) {
		s := &Store{Dir: t.TempDir(), Prefix: PrefixClient}
		elsewhere := &Store{Dir: t.TempDir(), Prefix: PrefixClient}
		path, err := elsewhere.Update(issue(t, ca, &known.PublicKey, "system:node:a", time.Now().Add(-time.Minute), time.Hour), known)
		if err != nil {
			t.Fatal(err)
		}
		inside := PrefixClient + "-2000-01-01-00-00-00.000000000.pem"
		if err := os.Symlink(path, filepath.Join(s.Dir, inside)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(inside, s.CurrentPath()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Current(); err == nil {
			t.Fatal("Current followed a pair file that is itself a link out of the directory")
		}
	})
}

// A key file that others may read is refused, not used.
func TestStoreRefusesAKeyFileOthersCanRead(t *testing.T) {
	ca := newCA(t)
	s := &Store{Dir: t.TempDir(), Prefix: PrefixClient}
	k := newKey(t)
	path, err := s.Update(issue(t, ca, &k.PublicKey, "system:node:a", time.Now().Add(-time.Minute), time.Hour), k)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the pair file: %v %v, want mode 0600", fi.Mode(), err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Current(); err == nil || !strings.Contains(err.Error(), "others") {
		t.Fatalf("Current with a pair file of mode 0644: %v", err)
	}
}

// A directory another user owns, or that its group or others may write, is
// refused for every operation; a missing one is made with mode 0700.
func TestStoreRefusesADirectoryOthersCanWrite(t *testing.T) {
	ca := newCA(t)
	k := newKey(t)
	cert := issue(t, ca, &k.PublicKey, "system:node:a", time.Now().Add(-time.Minute), time.Hour)
	for name, tc := range map[string]struct {
		mode os.FileMode
		uid  int
		want string
	}{
		"group-writable":            {mode: 0o770, uid: -1, want: "writable"},
		"world-writable":            {mode: 0o777, uid: -1, want: "writable"},
		"world-writable, sticky":    {mode: 0o1777, uid: -1, want: "writable"},
		"owned by another user":     {mode: 0o700, uid: 65534, want: "owned by uid 65534"},
		"another's, world-readable": {mode: 0o755, uid: 65534, want: "owned by uid 65534"},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.uid >= 0 && os.Geteuid() != 0 {
				t.Skip("chown needs root")
			}
			dir := t.TempDir()
			if tc.uid >= 0 {
				if err := os.Chown(dir, tc.uid, tc.uid); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			s := &Store{Dir: dir, Prefix: PrefixClient}
			check := func(op string, err error) {
				t.Helper()
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), dir) {
					t.Errorf("%s in a %s directory: %v, want an error naming it and saying %q", op, name, err, tc.want)
				}
			}
			_, err := s.PendingKey()
			check("PendingKey", err)
			_, err = s.Update(cert, k)
			check("Update", err)
			_, err = s.Current()
			check("Current", err)
			_, err = PrepareDir(dir)
			check("PrepareDir", err)
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("files were written in the refused directory: %v", entries)
			}
		})
	}

	t.Run("missing", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "pki")
		created, err := PrepareDir(dir)
		if err != nil || !created {
			t.Fatalf("PrepareDir of a missing directory: %v, created %v", err, created)
		}
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("the new directory: %v %v, want mode 0700", fi.Mode(), err)
		}
		if created, err := PrepareDir(dir); err != nil || created {
			t.Fatalf("PrepareDir again: %v, created %v", err, created)
		}
	})
}
