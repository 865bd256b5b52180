package plugin

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	"rekey.io/rekey/pkg/registry/printers"
)

// testChain is a PEM leaf followed by its issuer, and the leaf's SHA-256.
func testChain(t *testing.T, cn string) ([]byte, string) {
	t.Helper()
	chain, sum, _ := testIssued(t, cn)
	return chain, sum
}

// testIssued is testChain and the DER PKCS#10 request for the leaf's key.
func testIssued(t *testing.T, cn string) ([]byte, string, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	request, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}}, key)
	if err != nil {
		t.Fatal(err)
	}
	var chain []byte
	var leafSum string
	for i, name := range []string{cn, "issuer"} {
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(int64(i + 1)), Subject: pkix.Name{CommonName: name}, NotAfter: time.Now().Add(time.Hour)},
			&x509.Certificate{SerialNumber: big.NewInt(9)}, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			sum := sha256.Sum256(der)
			leafSum = hex.EncodeToString(sum[:])
		}
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	return chain, leafSum, request
}

func requestPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestRevoke(t *testing.T) {
	issuedPEM, issuedSum, issuedRequest := testIssued(t, "alice")
	hostPEM, hostSum, hostRequest := testIssued(t, "system:node:n1")
	pcrPEM, pcrSum, pcrRequest := testIssued(t, "pod")
	_, otherSum := testChain(t, "bob")
	issued := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "issued"}, Spec: certv1alpha1.CertificateSigningRequestSpec{Request: requestPEM(issuedRequest)},
		Status: certv1alpha1.CertificateSigningRequestStatus{Certificate: issuedPEM}}
	pending := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "pending"}}
	revokedBefore := &certv1alpha1.Revocation{ObjectMeta: metav1.ObjectMeta{Name: otherSum},
		Spec:   certv1alpha1.RevocationSpec{CertificateSHA256: otherSum, Reason: certv1alpha1.RevocationReasonKeyCompromise},
		Status: certv1alpha1.RevocationStatus{RevokedBy: "carol", RevocationTime: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}}
	hostCSR := &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "csr-x"}, Spec: certificatesv1.CertificateSigningRequestSpec{Request: requestPEM(hostRequest)}, Status: certificatesv1.CertificateSigningRequestStatus{Certificate: hostPEM}}
	pcr := &certificatesv1.PodCertificateRequest{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "team-a"}, Spec: certificatesv1.PodCertificateRequestSpec{StubPKCS10Request: pcrRequest}, Status: certificatesv1.PodCertificateRequestStatus{CertificateChain: string(pcrPEM)}}

	certFile := filepath.Join(t.TempDir(), "alice.crt")
	if err := os.WriteFile(certFile, issuedPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(t.TempDir(), "junk")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		args       []string
		wantErr    string // on ErrOut or as the returned error
		wantOut    []string
		wantSpecs  []certv1alpha1.RevocationSpec
		wantNoSend bool
	}{
		"a rekey request, RFC spelling of the reason": {
			args:      []string{"issued", "--reason", "key-compromise"},
			wantOut:   []string{revocationResource + issuedSum + ` revoked (KeyCompromise): subject "CN=alice", serial 01, issued for certificatesigningrequest.certificates.rekey.io/issued`},
			wantSpecs: []certv1alpha1.RevocationSpec{{CertificateSHA256: issuedSum, Reason: certv1alpha1.RevocationReasonKeyCompromise}},
		},
		"the default reason is Unspecified, -o name": {
			args:      []string{"issued", "-o", "name"},
			wantOut:   []string{revocationResource + issuedSum + "\n"},
			wantSpecs: []certv1alpha1.RevocationSpec{{CertificateSHA256: issuedSum, Reason: certv1alpha1.RevocationReasonUnspecified}},
		},
		"a request without a certificate is an error, the others are still revoked": {
			args:      []string{"pending", "issued", "--reason=cACompromise"},
			wantErr:   `certificatesigningrequest.certificates.rekey.io/pending has no certificate`,
			wantOut:   []string{issuedSum + " revoked (CACompromise)"},
			wantSpecs: []certv1alpha1.RevocationSpec{{CertificateSHA256: issuedSum, Reason: certv1alpha1.RevocationReasonCACompromise}},
		},
		"a missing request": {args: []string{"nope"}, wantErr: `cannot read certificatesigningrequest.certificates.rekey.io/nope`},
		"already revoked is success": {
			args:      []string{"--sha256", "X509SHA256=" + strings.ToUpper(otherSum)},
			wantOut:   []string{revocationResource + otherSum + " already revoked (KeyCompromise, at 2026-01-02T03:04:05Z by carol)"},
			wantSpecs: []certv1alpha1.RevocationSpec{{CertificateSHA256: otherSum, Reason: certv1alpha1.RevocationReasonUnspecified}},
		},
		"a host cluster CSR": {
			args:      []string{"--host-csr", "csr-x", "--reason", "superseded"},
			wantOut:   []string{revocationResource + hostSum + " revoked (Superseded)"},
			wantSpecs: []certv1alpha1.RevocationSpec{{CertificateSHA256: hostSum, Reason: certv1alpha1.RevocationReasonSuperseded}},
		},
		"a PodCertificateRequest in -n": {
			args:      []string{"--pcr", "web-0", "-n", "team-a"},
			wantOut:   []string{revocationResource + pcrSum + " revoked"},
			wantSpecs: []certv1alpha1.RevocationSpec{{CertificateSHA256: pcrSum, Reason: certv1alpha1.RevocationReasonUnspecified}},
		},
		"a PodCertificateRequest as NS/NAME": {
			args:      []string{"--pcr", "team-a/web-0"},
			wantSpecs: []certv1alpha1.RevocationSpec{{CertificateSHA256: pcrSum, Reason: certv1alpha1.RevocationReasonUnspecified}},
		},
		"by serial, in a CA": {
			args:      []string{"--serial", "5A:3C:01", "--ca", "team-ca", "--reason", "PRIVILEGE_WITHDRAWN"},
			wantOut:   []string{revocationResource + "server-named revoked (PrivilegeWithdrawn)"},
			wantSpecs: []certv1alpha1.RevocationSpec{{SerialNumber: "5a3c01", CAName: "team-ca", Reason: certv1alpha1.RevocationReasonPrivilegeWithdrawn}},
		},
		// A serial as printed without its leading zero (31 hex digits).
		"by serial, odd number of digits": {
			args:      []string{"--serial", "df83cfb0b4403c0646bbb86c295bb24"},
			wantSpecs: []certv1alpha1.RevocationSpec{{SerialNumber: "0df83cfb0b4403c0646bbb86c295bb24", Reason: certv1alpha1.RevocationReasonUnspecified}},
		},
		"a certificate file, its request gone": {
			args:      []string{"--cert", certFile, "--reason", "KeyCompromise"},
			wantOut:   []string{revocationResource + issuedSum + ` revoked (KeyCompromise): subject "CN=alice"`},
			wantSpecs: []certv1alpha1.RevocationSpec{{CertificateSHA256: issuedSum, Reason: certv1alpha1.RevocationReasonKeyCompromise}},
		},
		"a file without a certificate": {args: []string{"--cert", notPEM}, wantErr: "--cert " + notPEM},
		"an unknown reason":            {args: []string{"issued", "--reason", "lost"}, wantErr: `--reason "lost" is not an RFC 5280 reason`, wantNoSend: true},
		"a short sha256":               {args: []string{"--sha256", "abcd"}, wantErr: `has 2 bytes, not 32`},
		"nothing named":                {args: nil, wantErr: "name the certificates to revoke", wantNoSend: true},
		"--ca without --serial":        {args: []string{"issued", "--ca", "x"}, wantErr: "--ca goes with --serial", wantNoSend: true},
		"-o yaml":                      {args: []string{"issued", "-o", "yaml"}, wantErr: `only "name"`, wantNoSend: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			client := fake.NewSimpleClientset(issued.DeepCopy(), pending.DeepCopy(), revokedBefore.DeepCopy())
			// The server names a revocation by serial after the
			// certificate it finds.
			client.PrependReactor("create", "revocations", func(a k8stesting.Action) (bool, runtime.Object, error) {
				rev := a.(k8stesting.CreateAction).GetObject().(*certv1alpha1.Revocation)
				if rev.Name == "" {
					rev.Name = "server-named"
				}
				return false, nil, nil
			})
			kube := kubefake.NewSimpleClientset(hostCSR.DeepCopy(), pcr.DeepCopy())
			var out, errOut bytes.Buffer
			cmd := newRevokeCommand(func() (clientset.Interface, error) { return client, nil },
				func() (kubernetes.Interface, error) { return kube, nil },
				func() (string, error) { return "team-a", nil },
				genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
			// -n is kubectl's persistent flag in the real command.
			cmd.Flags().StringP("namespace", "n", "", "")
			cmd.SetArgs(tc.args)
			cmd.SetOut(&out)
			cmd.SetErr(&errOut)
			err := cmd.ExecuteContext(context.Background())
			if tc.wantErr == "" && err != nil {
				t.Fatalf("error = %v (errOut %q)", err, errOut.String())
			}
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("no error, want %q", tc.wantErr)
				}
				got := errOut.String()
				if !errors.Is(err, errAlreadyReported) {
					got = err.Error()
				}
				if !strings.Contains(got, tc.wantErr) {
					t.Fatalf("error %q, want %q", got, tc.wantErr)
				}
			}
			for _, want := range tc.wantOut {
				if !strings.Contains(out.String(), want) {
					t.Fatalf("out %q, want %q", out.String(), want)
				}
			}
			var specs []certv1alpha1.RevocationSpec
			for _, a := range client.Actions() {
				if a.GetVerb() == "create" {
					rev := a.(k8stesting.CreateAction).GetObject().(*certv1alpha1.Revocation)
					if rev.Spec.CertificateSHA256 != "" && rev.Name != rev.Spec.CertificateSHA256 {
						t.Fatalf("revocation named %q for sha256 %q", rev.Name, rev.Spec.CertificateSHA256)
					}
					specs = append(specs, rev.Spec)
				}
			}
			if tc.wantNoSend && len(client.Actions()) > 0 {
				t.Fatalf("sent %v", client.Actions())
			}
			if tc.wantSpecs != nil || len(specs) > 0 {
				if len(specs) != len(tc.wantSpecs) {
					t.Fatalf("created %+v, want %+v", specs, tc.wantSpecs)
				}
				for i := range specs {
					if specs[i] != tc.wantSpecs[i] {
						t.Fatalf("created %+v, want %+v", specs[i], tc.wantSpecs[i])
					}
				}
			}
		})
	}
}

func TestParseReason(t *testing.T) {
	for in, want := range map[string]certv1alpha1.RevocationReason{
		"keyCompromise": "KeyCompromise", "key-compromise": "KeyCompromise", "KEYCOMPROMISE": "KeyCompromise",
		"cACompromise": "CACompromise", "ca-compromise": "CACompromise", "aACompromise": "AACompromise",
		"cessation_of_operation": "CessationOfOperation", "unspecified": "Unspecified", "affiliationChanged": "AffiliationChanged",
	} {
		if got, err := parseReason(in); err != nil || got != want {
			t.Errorf("parseReason(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "certificateHold", "removeFromCRL", "compromise"} {
		if _, err := parseReason(in); err == nil {
			t.Errorf("parseReason(%q) accepted", in)
		}
	}
}

// A request's certificate is written by its signer: revoke refuses one
// that does not certify the request's key, for every kind of request, and
// looks at the leaf only (a chain that carries the request's certificate
// after another one is refused too).
func TestRevokeChecksTheCertificateIsTheRequests(t *testing.T) {
	ownPEM, _, ownRequest := testIssued(t, "own")
	victimPEM, _ := testChain(t, "system:kube-scheduler")
	client := fake.NewSimpleClientset(
		&certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "behind"}, Spec: certv1alpha1.CertificateSigningRequestSpec{Request: requestPEM(ownRequest)},
			Status: certv1alpha1.CertificateSigningRequestStatus{Certificate: append(append([]byte(nil), victimPEM...), ownPEM...)}},
		&certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "garbled"}, Spec: certv1alpha1.CertificateSigningRequestSpec{Request: []byte("not a request")},
			Status: certv1alpha1.CertificateSigningRequestStatus{Certificate: ownPEM}})
	kube := kubefake.NewSimpleClientset(
		&certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "csr-planted"}, Spec: certificatesv1.CertificateSigningRequestSpec{Request: requestPEM(ownRequest)},
			Status: certificatesv1.CertificateSigningRequestStatus{Certificate: victimPEM}},
		&certificatesv1.PodCertificateRequest{ObjectMeta: metav1.ObjectMeta{Name: "pcr-planted", Namespace: "team-a"}, Spec: certificatesv1.PodCertificateRequestSpec{StubPKCS10Request: ownRequest},
			Status: certificatesv1.PodCertificateRequestStatus{CertificateChain: string(victimPEM)}})
	var out, errOut bytes.Buffer
	cmd := newRevokeCommand(func() (clientset.Interface, error) { return client, nil },
		func() (kubernetes.Interface, error) { return kube, nil },
		func() (string, error) { return "team-a", nil },
		genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
	cmd.Flags().StringP("namespace", "n", "", "")
	cmd.SetArgs([]string{"behind", "garbled", "--host-csr", "csr-planted", "--pcr", "team-a/pcr-planted"})
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	if err := cmd.ExecuteContext(context.Background()); err == nil {
		t.Fatal("no error")
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" {
			t.Fatalf("created %v; out %q", a, out.String())
		}
	}
	for _, want := range []string{
		`certificatesigningrequest.certificates.rekey.io/behind: refusing to revoke its certificate (subject "CN=system:kube-scheduler", serial 01): it is not for the request's public key`,
		`certificatesigningrequest.certificates.rekey.io/garbled: cannot read the public key of its request`,
		`certificatesigningrequest.certificates.k8s.io/csr-planted: refusing to revoke its certificate`,
		`podcertificaterequest.certificates.k8s.io/pcr-planted (namespace team-a): refusing to revoke its certificate`,
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("errOut %q, want %q", errOut.String(), want)
		}
	}
}

// TestSerialHex: serials print as even-length hex, as openssl does,
// keeping the leading zero of a first byte below 0x10.
func TestSerialHex(t *testing.T) {
	n, _ := new(big.Int).SetString("0df83cfb0b4403c0646bbb86c295bb24", 16)
	for in, want := range map[*big.Int]string{n: "0df83cfb0b4403c0646bbb86c295bb24", big.NewInt(1): "01", big.NewInt(0x2a): "2a", big.NewInt(0): "00", big.NewInt(0x100): "0100"} {
		if got := printers.SerialHex(in); got != want {
			t.Errorf("SerialHex(%s) = %q, want %q", in.Text(16), got, want)
		}
	}
}
