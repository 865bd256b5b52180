package signing_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/test/etcdtest"
)

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func parsedRequest(t *testing.T, tmpl *x509.CertificateRequest) *x509.CertificateRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	req, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestIssueCopiesOnlyWhatItShould: subject and SANs from the request, usages
// from the decision, never a CA, never past the CA, other extensions dropped.
func TestIssueCopiesOnlyWhatItShould(t *testing.T) {
	caKey, err := signing.GenerateKey(signing.ECDSAP384)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := signing.NewSelfSignedCA("test CA", caKey, 10*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	req := parsedRequest(t, &x509.CertificateRequest{
		Subject:         pkix.Name{CommonName: "alice", Organization: []string{"dev"}},
		DNSNames:        []string{"alice.example.com"},
		ExtraExtensions: []pkix.Extension{{Id: []int{1, 2, 3, 4}, Value: []byte{5, 0}}},
	})
	_, cert, err := signing.Issue(signing.Issuance{Request: req, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Duration: 100 * time.Hour, Now: now}, ca, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		t.Fatal(err)
	}
	if cert.IsCA || cert.Subject.CommonName != "alice" || cert.Subject.Organization[0] != "dev" || cert.DNSNames[0] != "alice.example.com" {
		t.Fatalf("certificate %+v", cert.Subject)
	}
	if !cert.NotAfter.Equal(ca.NotAfter) {
		t.Errorf("NotAfter %v outlives the CA's %v", cert.NotAfter, ca.NotAfter)
	}
	if !cert.NotBefore.Equal(now.Add(-signing.Backdate)) && !cert.NotBefore.Equal(ca.NotBefore) {
		t.Errorf("NotBefore %v", cert.NotBefore)
	}
	for _, ext := range cert.Extensions {
		if ext.Id.String() == "1.2.3.4" {
			t.Fatal("a requested extension was copied into the certificate")
		}
	}
	if signing.Fingerprint(cert) == signing.Fingerprint(ca) || !strings.HasPrefix(signing.Fingerprint(cert), "SHA256:") {
		t.Errorf("fingerprint %s", signing.Fingerprint(cert))
	}
}

func TestGenerateKeyAlgorithms(t *testing.T) {
	for _, alg := range []signing.Algorithm{signing.ECDSAP256, signing.ECDSAP384, signing.RSA2048, signing.Ed25519} {
		if _, err := signing.GenerateKey(alg); err != nil {
			t.Errorf("%s: %v", alg, err)
		}
	}
	if _, err := signing.GenerateKey("DSA"); err == nil {
		t.Error("DSA accepted")
	}
}

func TestLoadKEK(t *testing.T) {
	dir := t.TempDir()
	raw := make([]byte, signing.KEKSize)
	for name, content := range map[string]string{
		"raw":    string(raw),
		"base64": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n",
		"hex":    strings.Repeat("00", signing.KEKSize) + "\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if kek, err := signing.LoadKEK(p); err != nil || len(kek) != signing.KEKSize {
			t.Errorf("%s: %v", name, err)
		}
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("secret-but-short"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := signing.LoadKEK(short)
	if err == nil || strings.Contains(err.Error(), "secret-but-short") {
		t.Fatalf("short key: error %v (must not quote the file)", err)
	}
}

// TestEtcdKeyStore: keys survive a new store with the same KEK, are sealed
// (no key bytes in etcd), and a different KEK is refused without a write.
func TestEtcdKeyStore(t *testing.T) {
	ctx := context.Background()
	client := etcdtest.Start(t)
	kek, err := signing.NewKEK()
	if err != nil {
		t.Fatal(err)
	}
	store, err := signing.NewEtcdKeyStore(ctx, client, "/p", kek)
	if err != nil {
		t.Fatal(err)
	}
	key, created, err := store.GetOrCreate(ctx, "ca-1", signing.ECDSAP256)
	if err != nil || !created {
		t.Fatalf("GetOrCreate: %v created=%v", err, created)
	}
	again, created, err := store.GetOrCreate(ctx, "ca-1", signing.ECDSAP256)
	if err != nil || created || !signing.PublicKeysEqual(key.Public(), again.Public()) {
		t.Fatalf("second GetOrCreate: %v created=%v", err, created)
	}
	raw, err := client.Get(ctx, "/p/cakeys/ca-1")
	if err != nil || len(raw.Kvs) != 1 {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw.Kvs[0].Value), string(der[len(der)-32:])) {
		t.Fatal("the key's bytes are in etcd")
	}
	reopened, err := signing.NewEtcdKeyStore(ctx, client, "/p", kek)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := reopened.Get(ctx, "ca-1"); err != nil || !signing.PublicKeysEqual(got.Public(), key.Public()) {
		t.Fatalf("reopened: %v", err)
	}
	// A ciphertext moved to another key ID does not open (the etcd key is
	// the additional data).
	if _, err := client.Put(ctx, "/p/cakeys/ca-2", string(raw.Kvs[0].Value)); err != nil {
		t.Fatal(err)
	}
	if _, err := reopened.Get(ctx, "ca-2"); err == nil {
		t.Fatal("a sealed key moved to another ID opened")
	}
	before, err := client.Get(ctx, "/", clientv3WithPrefix()...)
	if err != nil {
		t.Fatal(err)
	}
	other, err := signing.NewKEK()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := signing.NewEtcdKeyStore(ctx, client, "/p", other); err == nil || !strings.Contains(err.Error(), "refusing to start") {
		t.Fatalf("wrong KEK: %v", err)
	}
	after, err := client.Get(ctx, "/", clientv3WithPrefix()...)
	if err != nil {
		t.Fatal(err)
	}
	if before.Header.Revision != after.Header.Revision {
		t.Fatal("a wrong KEK wrote to etcd")
	}
	if err := reopened.Delete(ctx, "ca-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := reopened.Get(ctx, "ca-1"); err == nil {
		t.Fatal("deleted key still there")
	}
}

// TestFileCAPicksUpReplacedFilesAndChecksThem.
func TestFileCAPicksUpReplacedFilesAndChecksThem(t *testing.T) {
	dir := t.TempDir()
	// FileCA notices a replacement by the files' size and modification
	// time: each write stamps its own time, so that two writes in the same
	// clock tick still look different.
	write := func(cn string, mtime time.Time) *x509.Certificate {
		key, err := signing.GenerateKey(signing.ECDSAP256)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := signing.NewSelfSignedCA(cn, key, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "ca.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"ca.key", "ca.crt"} {
			if err := os.Chtimes(filepath.Join(dir, f), mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
		return cert
	}
	stamp := time.Now().Add(-time.Hour)
	first := write("first", stamp)
	f := &signing.FileCA{CertFile: filepath.Join(dir, "ca.crt"), KeyFile: filepath.Join(dir, "ca.key")}
	got, _, err := f.Current()
	if err != nil || !got.Equal(first) {
		t.Fatalf("first: %v", err)
	}
	second := write("second", stamp.Add(time.Second))
	got, _, err = f.Current()
	if err != nil || !got.Equal(second) {
		t.Fatalf("replaced files not picked up: %v", err)
	}
	// A key that does not match the certificate is refused.
	otherKey, err := signing.GenerateKey(signing.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(otherKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := signing.LoadCAFiles(f.CertFile, f.KeyFile); err == nil || !strings.Contains(err.Error(), "does not hold the private key") {
		t.Fatalf("mismatched key: %v", err)
	}
	// Text around the key block is refused, and the message quotes nothing.
	if err := os.WriteFile(filepath.Join(dir, "ca.key"), append([]byte("secret text\n"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := signing.LoadCAFiles(f.CertFile, f.KeyFile); err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("key file with text: %v", err)
	}
}

func clientv3WithPrefix() []clientv3.OpOption { return []clientv3.OpOption{clientv3.WithPrefix()} }
