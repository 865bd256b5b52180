package framework

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/asn1"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"rekey.io/rekey/pkg/agent/tpmnode"
	"rekey.io/rekey/pkg/attest"
	"rekey.io/rekey/pkg/pki"
)

// SWTPMLocalCA is where swtpm_setup's local CA keeps the certificates
// that sign every swtpm's EK certificate on this host.
const SWTPMLocalCA = "/var/lib/swtpm-localca"

// swtpmLocalCARoot is the local CA's root certificate.
var swtpmLocalCARoot = filepath.Join(SWTPMLocalCA, "swtpm-localca-rootca-cert.pem")

// StartSWTPM manufactures a TPM 2.0 with EK certificates (signed by the
// host's swtpm local CA) in a temporary directory, serves its raw command
// port on loopback, and returns its address as tcp://127.0.0.1:PORT. The
// emulator stops when the test ends.
func StartSWTPM(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	manufactureSWTPM(t, dir)
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
// swtpm_setup creates that CA the first time it certifies an EK, so on a
// fresh host one TPM is manufactured first when the CA is not there yet
// (a test that reads the roots before any test started an swtpm once
// failed on a fresh machine).
func SWTPMRoots(t testing.TB) (root, intermediate []byte) {
	t.Helper()
	ensureSWTPMLocalCA(t)
	var err error
	if root, err = os.ReadFile(swtpmLocalCARoot); err != nil {
		t.Fatal(fmt.Errorf("the swtpm local CA: %w", err))
	}
	if intermediate, err = os.ReadFile(filepath.Join(SWTPMLocalCA, "issuercert.pem")); err != nil {
		t.Fatal(err)
	}
	return root, intermediate
}

// ProvisionECCEKCertificate does what a TPM vendor does for the standard
// ECC P-256 EK, which swtpm_setup does not make (its ECC EK is P-384, at
// another index): it certifies the TPM's P-256 EK with a CA of its own and
// writes the certificate to NV index 0x01c0000a. It returns the CA
// certificate (PEM), the root to put in a policy.
func ProvisionECCEKCertificate(t testing.TB, addr string) []byte {
	t.Helper()
	dev, err := tpmnode.Open(addr)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := dev.EKOf(tpmnode.EKECC)
	if err != nil {
		t.Fatal(err)
	}
	dev.Flush(ek.Handle)
	_ = dev.Close()
	_, ekKey, err := attest.ParseEKPublic(ek.Public)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("emulated TPM vendor EK root", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:           x509.KeyUsageKeyAgreement,
		UnknownExtKeyUsage: []asn1.ObjectIdentifier{{2, 23, 133, 8, 1}},
	}, ca.Cert, ekKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}

	hostPort := strings.TrimPrefix(addr, "tcp://")
	conn, err := net.DialTimeout("tcp", hostPort, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tpm := transport.FromReadWriteCloser(conn)
	defer func() { _ = tpm.Close() }()
	index := tpmnode.EKCertificateIndexECC
	nvPublic := tpm2.New2B(tpm2.TPMSNVPublic{
		NVIndex: index, NameAlg: tpm2.TPMAlgSHA256, DataSize: uint16(len(certDER)),
		Attributes: tpm2.TPMANV{OwnerWrite: true, AuthWrite: true, OwnerRead: true, AuthRead: true, NoDA: true, NT: tpm2.TPMNTOrdinary},
	})
	if _, err := (tpm2.NVDefineSpace{AuthHandle: tpm2.TPMRHOwner, PublicInfo: nvPublic}).Execute(tpm); err != nil {
		t.Fatalf("defining NV index %#x: %v", index, err)
	}
	read, err := tpm2.NVReadPublic{NVIndex: index}.Execute(tpm)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(certDER); off += 512 {
		chunk := certDER[off:min(off+512, len(certDER))]
		_, err := tpm2.NVWrite{
			AuthHandle: tpm2.AuthHandle{Handle: index, Name: read.NVName, Auth: tpm2.PasswordAuth(nil)},
			NVIndex:    tpm2.NamedHandle{Handle: index, Name: read.NVName},
			Data:       tpm2.TPM2BMaxNVBuffer{Buffer: chunk}, Offset: uint16(off),
		}.Execute(tpm)
		if err != nil {
			t.Fatalf("writing the EK certificate: %v", err)
		}
	}
	return ca.CertPEM()
}

// manufactureSWTPM writes a TPM 2.0's state to dir with EK and platform
// certificates signed by the host's swtpm local CA (which swtpm_setup
// creates the first time).
func manufactureSWTPM(t testing.TB, dir string) {
	t.Helper()
	if out, err := exec.Command("swtpm_setup", "--tpm2", "--tpmstate", dir, "--create-ek-cert", "--create-platform-cert", "--lock-nvram").CombinedOutput(); err != nil {
		t.Fatalf("swtpm_setup: %v\n%s", err, out)
	}
}

// ensureSWTPMLocalCA manufactures a throwaway TPM when the host's swtpm
// local CA has no root certificate yet, so that swtpm_setup creates it.
func ensureSWTPMLocalCA(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(swtpmLocalCARoot); err == nil {
		return
	}
	manufactureSWTPM(t, t.TempDir())
}
