package server

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A --data-dir too long for the embedded etcd's socket is refused before
// anything is made: no directory is left behind (issue #32), and the
// message says how long a path may be.
func TestTooLongDataDirLeavesNothingBehind(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "made", strings.Repeat("x", 110))
	o := NewOptions(io.Discard, io.Discard)
	o.Standalone.Enabled = true
	o.Standalone.DataDir = dir
	err := o.Complete()
	if err == nil || !strings.Contains(err.Error(), "--data-dir") || !strings.Contains(err.Error(), "too long for etcd's unix socket") ||
		!strings.Contains(err.Error(), "choose a directory with a path at most 97 bytes long") {
		t.Fatalf("error = %v, want --data-dir refused as too long with the limit", err)
	}
	if _, statErr := os.Stat(filepath.Join(parent, "made")); !os.IsNotExist(statErr) {
		t.Fatalf("a refused --data-dir left %s behind (stat: %v)", filepath.Join(parent, "made"), statErr)
	}

	o = NewOptions(io.Discard, io.Discard)
	o.EmbeddedEtcd.Dir = dir
	o.KeyStores.KEKSecret = "rekey-system/rekey-ca-kek"
	if err := o.Complete(); err == nil || !strings.Contains(err.Error(), "--embedded-etcd-dir") {
		t.Fatalf("error = %v, want --embedded-etcd-dir refused as too long", err)
	}
	if _, statErr := os.Stat(filepath.Join(parent, "made")); !os.IsNotExist(statErr) {
		t.Fatalf("a refused --embedded-etcd-dir left a directory behind (stat: %v)", statErr)
	}
}
