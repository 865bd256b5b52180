package standalone

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestUserKubeconfig(t *testing.T) {
	dir := t.TempDir()
	if _, err := UserKubeconfig(dir, "", "alice", nil); err == nil || !strings.Contains(err.Error(), "make run") {
		t.Fatalf("before the server started: %v, want the hint to start it", err)
	}
	p := PKI{Dir: filepath.Join(dir, "pki")}
	if err := p.Ensure([]string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteAdminKubeconfig(filepath.Join(dir, AdminKubeconfigFile), "https://127.0.0.1:9443"); err != nil {
		t.Fatal(err)
	}
	if _, err := UserKubeconfig(dir, "", "", nil); err == nil || !strings.Contains(err.Error(), "--user") {
		t.Fatalf("no user: %v", err)
	}
	data, err := UserKubeconfig(dir, "", "alice", []string{"dev", "qa"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rest.Host != "https://127.0.0.1:9443" || len(rest.CAData) == 0 {
		t.Errorf("server %q, CA %d bytes: want the admin kubeconfig's", rest.Host, len(rest.CAData))
	}
	block, _ := pem.Decode(rest.CertData)
	if block == nil {
		t.Fatal("no certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "alice" || !slices.Equal(slices.Sorted(slices.Values(cert.Subject.Organization)), []string{"dev", "qa"}) {
		t.Errorf("subject %v", cert.Subject)
	}
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(p.Path(ClientCAFile))
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(caPEM)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the certificate does not chain to the standalone client CA: %v", err)
	}
	if other, _ := UserKubeconfig(dir, "https://rekey.example:8443", "bob", nil); !strings.Contains(string(other), "https://rekey.example:8443") {
		t.Errorf("--server not used:\n%s", other)
	}
}
