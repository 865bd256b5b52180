package pki

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
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

// TestClientCAIsRSAAndIssuesVerifiableClientCertificates: the client CA
// is RSA-2048 (cheap to verify on every request); its leaves are ECDSA.
func TestClientCAIsRSAAndIssuesVerifiableClientCertificates(t *testing.T) {
	ca, err := NewClientCA("clients", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if key, ok := ca.Key.(*rsa.PrivateKey); !ok || key.N.BitLen() != 2048 || !ca.Cert.IsCA {
		t.Fatalf("client CA key %T, IsCA %v", ca.Key, ca.Cert.IsCA)
	}
	leaf, err := ca.Issue(&x509.Certificate{Subject: pkix.Name{CommonName: "alice"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := leaf.Key.(*ecdsa.PrivateKey); !ok {
		t.Errorf("leaf key %T, want ECDSA", leaf.Key)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := leaf.Cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := ca.Write(dir+"/ca.crt", dir+"/ca.key"); err != nil {
		t.Fatal(err)
	}
	if loaded, err := Load(dir+"/ca.crt", dir+"/ca.key"); err != nil || !loaded.Cert.Equal(ca.Cert) {
		t.Fatalf("reloading the RSA CA: %v", err)
	}
}
