package main

import (
	"archive/tar"
	"io"
	"testing"
)

// The same binary makes the same image: nothing in it depends on when or
// where it was built.
func TestBuildIsReproducible(t *testing.T) {
	bin := []byte("\x7fELF not really")
	a, err := build("rekey-apiserver", bin, "65532:65532", "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := build("rekey-apiserver", bin, "65532:65532", "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Fatalf("digests differ: %s vs %s", da, db)
	}
	other, err := build("rekey-apiserver", append(bin, '!'), "65532:65532", "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := other.Digest(); d == da {
		t.Fatal("a different binary gave the same digest")
	}

	cf, err := a.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/rekey-apiserver" || cf.OS != "linux" {
		t.Fatalf("config %+v", cf.Config)
	}
	layers, err := a.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %v, %v", layers, err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.ModTime.Unix() != 0 || h.Uid != 0 || h.Mode&0o222 != 0 {
			t.Fatalf("entry %s: mtime %v uid %d mode %o", h.Name, h.ModTime, h.Uid, h.Mode)
		}
		names = append(names, h.Name)
	}
	if len(names) != 1 || names[0] != "rekey-apiserver" {
		t.Fatalf("layer holds %v", names)
	}
}
