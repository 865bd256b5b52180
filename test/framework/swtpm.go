package framework

import (
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"rekey.io/rekey/pkg/agent/tpmnode"
)

// SWTPMLocalCA is where swtpm_setup's local CA keeps the certificates
// that sign every swtpm's EK certificate on this host.
const SWTPMLocalCA = "/var/lib/swtpm-localca"

// StartSWTPM manufactures a TPM 2.0 with EK certificates (signed by the
// host's swtpm local CA) in a temporary directory, serves its raw command
// port on loopback, and returns its address as tcp://127.0.0.1:PORT. The
// emulator stops when the test ends.
func StartSWTPM(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("swtpm_setup", "--tpm2", "--tpmstate", dir, "--create-ek-cert", "--create-platform-cert", "--lock-nvram").CombinedOutput(); err != nil {
		t.Fatalf("swtpm_setup: %v\n%s", err, out)
	}
	ports, err := FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(dir, "swtpm", "swtpm", "socket", "--tpm2", "--tpmstate", "dir="+dir,
		"--server", "type=tcp,bindaddr=127.0.0.1,port="+strconv.Itoa(ports[0]),
		"--ctrl", "type=tcp,bindaddr=127.0.0.1,port="+strconv.Itoa(ports[1]),
		"--flags", "not-need-init,startup-clear")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	if err := waitUntil(10*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}); err != nil {
		t.Fatalf("swtpm did not listen: %s", p.LogTail(2000))
	}
	return "tcp://" + addr
}

// OpenSWTPM starts an emulated TPM (StartSWTPM) and opens it as
// rekey-agent does; both end with the test.
func OpenSWTPM(t testing.TB) *tpmnode.Device {
	t.Helper()
	dev, err := tpmnode.Open(StartSWTPM(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	return dev
}

// SWTPMCertPools returns the swtpm local CA's root and intermediate as
// certificate pools, for verifying EK certificates.
func SWTPMCertPools(t testing.TB) (roots, intermediates *x509.CertPool) {
	t.Helper()
	root, intermediate := SWTPMRoots(t)
	roots, intermediates = x509.NewCertPool(), x509.NewCertPool()
	if !roots.AppendCertsFromPEM(root) || !intermediates.AppendCertsFromPEM(intermediate) {
		t.Fatal("the swtpm local CA files hold no certificate")
	}
	return roots, intermediates
}

// SWTPMRoots returns the PEM of the swtpm local CA's root and intermediate.
func SWTPMRoots(t testing.TB) (root, intermediate []byte) {
	t.Helper()
	var err error
	if root, err = os.ReadFile(filepath.Join(SWTPMLocalCA, "swtpm-localca-rootca-cert.pem")); err != nil {
		t.Fatal(fmt.Errorf("the swtpm local CA: %w", err))
	}
	if intermediate, err = os.ReadFile(filepath.Join(SWTPMLocalCA, "issuercert.pem")); err != nil {
		t.Fatal(err)
	}
	return root, intermediate
}
