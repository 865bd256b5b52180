package pki

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCAIssueWriteLoad(t *testing.T) {
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(&x509.Certificate{DNSNames: []string{"localhost"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.Cert.CheckSignatureFrom(ca.Cert); err != nil || leaf.Cert.IsCA || !ca.Cert.IsCA {
		t.Fatalf("leaf does not chain to the CA: %v", err)
	}
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := leaf.Write(certPath, keyPath); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(keyPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", st.Mode(), err)
	}
	loaded, err := Load(certPath, keyPath)
	if err != nil || !loaded.Cert.Equal(leaf.Cert) {
		t.Fatalf("Load: %v", err)
	}
	// Strict: text before the certificate is refused.
	data, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certPath, append([]byte("note\n"), data...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(certPath, keyPath); err == nil || !strings.Contains(err.Error(), certPath) {
		t.Fatalf("Load with text before the block: %v", err)
	}
}

func TestWriteFileAtomicReplaces(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	for _, content := range []string{"one", "two"} {
		if err := WriteFileAtomic(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != "two" {
		t.Fatalf("content %q", got)
	}
	entries, err := os.ReadDir(filepath.Dir(p))
	if err != nil || len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
}
