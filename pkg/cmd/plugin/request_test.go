package plugin

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	"rekey.io/rekey/pkg/signing"
)

// testCA signs what the fake signer issues.
type testCA struct {
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{key: key, cert: cert}
}

func (ca *testCA) pem() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}))
}

// issue signs the request's key and subject, as a signer would.
func (ca *testCA) issue(t *testing.T, requestPEM []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(requestPEM)
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(42), Subject: req.Subject, DNSNames: req.DNSNames, IPAddresses: req.IPAddresses,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature},
		ca.cert, req.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// signerOutcome is what the fake server does when a request is approved.
type signerOutcome int

const (
	outcomeIssue   signerOutcome = iota // the approval write carries the certificate
	outcomeFail                         // the approval write carries Failed
	outcomeNothing                      // nothing signs
)

// fakeServer is a fake clientset whose approval writes issue (or fail)
// as rekey's approval write does.
func fakeServer(t *testing.T, ca *testCA, outcome signerOutcome, objects ...runtime.Object) *fake.Clientset {
	t.Helper()
	client := fake.NewSimpleClientset(objects...)
	gvr := certv1alpha1.SchemeGroupVersion.WithResource("certificatesigningrequests")
	client.PrependReactor("update", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "approval" {
			return false, nil, nil
		}
		csr := a.(k8stesting.UpdateAction).GetObject().(*certv1alpha1.CertificateSigningRequest).DeepCopy()
		switch outcome {
		case outcomeIssue:
			csr.Status.Certificate = ca.issue(t, csr.Spec.Request)
		case outcomeFail:
			csr.Status.Conditions = append(csr.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
				Type: certv1alpha1.CertificateFailed, Status: metav1.ConditionTrue, Reason: "SignerPolicyViolation",
				Message: `signer example.com/s refused the request: policy.allowedUsages: usage "server auth" is not allowed`})
		}
		if err := client.Tracker().Update(gvr, csr, ""); err != nil {
			return true, nil, err
		}
		return true, csr, nil
	})
	return client
}

type runResult struct {
	out, errOut string
	err         error
}

func testDeps(client clientset.Interface, warnings []string) requestDeps {
	return requestDeps{
		newClient: func() (clientset.Interface, error) { return client, nil },
		newWarningClient: func(w *warningList) (clientset.Interface, error) {
			f := fake.NewSimpleClientset()
			f.PrependReactor("create", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
				create := a.(k8stesting.CreateActionImpl)
				if len(create.CreateOptions.DryRun) == 0 {
					t := "the plugin's dry run must be a dry-run create"
					return true, nil, apierrors.NewBadRequest(t)
				}
				csr := create.GetObject().(*certv1alpha1.CertificateSigningRequest).DeepCopy()
				csr.Spec.Username = "alice"
				for _, text := range warnings {
					w.HandleWarningHeader(299, "", text)
				}
				return true, csr, nil
			})
			return f, nil
		},
		restConfig: func() (*rest.Config, error) {
			return &rest.Config{Host: "https://rekey.example:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("the server's CA")}}, nil
		},
		whoAmI: func(context.Context) (string, error) { return "alice", nil },
	}
}

func runRequest(t *testing.T, deps requestDeps, dir string, args ...string) runResult {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRequestCommand(deps, genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	// The flags name files relative to the working directory, as a user
	// types them.
	t.Chdir(dir)
	err := cmd.ExecuteContext(context.Background())
	return runResult{out.String(), errOut.String(), err}
}

func readKeyFile(t *testing.T, file string) crypto.Signer {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	key, err := parsePrivateKeyPEM("test", file, data)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func leafOf(t *testing.T, chain []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(chain)
	if block == nil {
		t.Fatalf("no PEM in %q", chain)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestRequestNewKeyApproveWaitOut: one command makes the key (0600), the
// request as the flags say, approves it, waits and writes the
// certificate and a kubeconfig that uses them.
// TestRequestKubeconfigOutStandaloneNote: --kubeconfig-out against a
// standalone server (no core API) says the file will not work there and
// how to make one that does; against a cluster it says nothing more.
func TestRequestKubeconfigOutStandaloneNote(t *testing.T) {
	for _, standalone := range []bool{true, false} {
		dir := t.TempDir()
		deps := testDeps(fakeServer(t, newTestCA(t, "CA"), outcomeIssue), nil)
		deps.servesCoreAPI = func(context.Context) (bool, error) { return !standalone, nil }
		r := runRequest(t, deps, dir, "k", "--signer", "example.com/s", "--new-key", "k.key", "--cn", "k", "--approve", "--kubeconfig-out", "k.kubeconfig")
		if r.err != nil {
			t.Fatalf("%v\n%s\n%s", r.err, r.out, r.errOut)
		}
		if got := strings.Contains(r.out+r.errOut, "rekey-apiserver standalone user-kubeconfig"); got != standalone {
			t.Errorf("standalone %v: note shown %v:\n%s%s", standalone, got, r.out, r.errOut)
		}
	}
}

func TestRequestNewKeyApproveWaitOut(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "team CA")
	client := fakeServer(t, ca, outcomeIssue)
	r := runRequest(t, testDeps(client, nil), dir, "alice", "--signer", "example.com/s", "--new-key", "alice.key", "--cn", "alice", "--org", "dev",
		"--dns", "alice.example.com", "--ip", "10.0.0.1", "--usages", "digital-signature,Client Auth", "--duration", "24h",
		"--approve", "--wait", "--out", "alice.crt", "--kubeconfig-out", "alice.kubeconfig")
	if r.err != nil {
		t.Fatalf("%v\n%s\n%s", r.err, r.out, r.errOut)
	}
	for _, want := range []string{"alice created", "alice approved", `issued: subject "CN=alice,O=dev"`, "certificate written to alice.crt", "kubeconfig written to alice.kubeconfig"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("output lacks %q:\n%s", want, r.out)
		}
	}
	st, err := os.Stat(filepath.Join(dir, "alice.key"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	key := readKeyFile(t, filepath.Join(dir, "alice.key"))
	if _, ok := key.Public().(*ecdsa.PublicKey); !ok || key.Public().(*ecdsa.PublicKey).Curve != elliptic.P256() {
		t.Fatalf("default key is %T, want ECDSA P-256", key.Public())
	}
	chain, err := os.ReadFile(filepath.Join(dir, "alice.crt"))
	if err != nil {
		t.Fatal(err)
	}
	leaf := leafOf(t, chain)
	if !signing.PublicKeysEqual(leaf.PublicKey, key.Public()) || leaf.CheckSignatureFrom(ca.cert) != nil {
		t.Fatalf("the certificate is not for the key, or not from the CA")
	}
	stored, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), "alice", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if stored.Spec.SignerName != "example.com/s" || *stored.Spec.ExpirationSeconds != 86400 ||
		strings.Join([]string{string(stored.Spec.Usages[0]), string(stored.Spec.Usages[1])}, ",") != "digital signature,client auth" {
		t.Fatalf("spec %+v", stored.Spec)
	}
	req, err := requestOf(stored)
	if err != nil {
		t.Fatal(err)
	}
	if req.Subject.String() != "CN=alice,O=dev" || req.DNSNames[0] != "alice.example.com" || req.IPAddresses[0].String() != "10.0.0.1" {
		t.Fatalf("request subject %s, SANs %v %v", req.Subject, req.DNSNames, req.IPAddresses)
	}
	if c := certv1alpha1.GetCondition(stored, certv1alpha1.CertificateApproved); c == nil || c.Reason != "KubectlRekeyApprove" {
		t.Fatalf("approval %+v", c)
	}

	st, err = os.Stat(filepath.Join(dir, "alice.kubeconfig"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig file: %v %v", st, err)
	}
	kc, err := clientcmd.LoadFromFile(filepath.Join(dir, "alice.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cluster, user := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster], kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]
	if cluster.Server != "https://rekey.example:6443" || string(cluster.CertificateAuthorityData) != "the server's CA" || !bytes.Equal(user.ClientCertificateData, chain) {
		t.Fatalf("kubeconfig cluster %+v", cluster)
	}
	if kcKey, err := parsePrivateKeyPEM("kubeconfig", "", user.ClientKeyData); err != nil || !signing.PublicKeysEqual(kcKey.Public(), key.Public()) {
		t.Fatalf("kubeconfig key: %v", err)
	}
}

// TestRequestCertificateToStdout: without --out the certificate is the
// only thing on standard output.
func TestRequestCertificateToStdout(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "CA")
	r := runRequest(t, testDeps(fakeServer(t, ca, outcomeIssue), nil), dir, "bob", "--signer", "example.com/s", "--new-key", "bob.key", "--cn", "bob", "--approve")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if leaf := leafOf(t, []byte(r.out)); leaf.Subject.CommonName != "bob" || !strings.HasPrefix(r.out, "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("stdout %q", r.out)
	}
	if !strings.Contains(r.errOut, "bob created") {
		t.Fatalf("stderr %q", r.errOut)
	}
}

func TestRequestErrors(t *testing.T) {
	ca := newTestCA(t, "CA")
	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherRequest, err := createRequestPEM(&x509.CertificateRequest{Subject: pkix.Name{CommonName: "taken"}}, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	taken := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "taken"}, Spec: certv1alpha1.CertificateSigningRequestSpec{Request: otherRequest, SignerName: "example.com/s"}}
	// Alice's own request, as the flags below would make it: resumed.
	denied := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "denied"}, Spec: certv1alpha1.CertificateSigningRequestSpec{Request: otherRequest, SignerName: "example.com/s",
		Username: "alice", Usages: []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth}},
		Status: certv1alpha1.CertificateSigningRequestStatus{Conditions: []certv1alpha1.CertificateSigningRequestCondition{{Type: certv1alpha1.CertificateDenied, Status: metav1.ConditionTrue, Reason: "NotOurs", Message: "ask the team lead"}}}}
	otherKeyPEM, err := marshalPrivateKeyPEM(otherKey)
	if err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		outcome  signerOutcome
		args     []string
		files    map[string]string
		wantErr  string
		wantGone []string // files that must not exist afterwards
		wantKept map[string]string
	}{
		"no key":               {args: []string{"x", "--signer", "example.com/s", "--cn", "x"}, wantErr: "give the key: --new-key FILE"},
		"no signer":            {args: []string{"x", "--new-key", "x.key", "--cn", "x"}, wantErr: `"signer" not set`},
		"nothing named":        {args: []string{"x", "--signer", "example.com/s", "--new-key", "x.key"}, wantErr: "the request names nothing", wantGone: []string{"x.key"}},
		"bad usage":            {args: []string{"x", "--signer", "example.com/s", "--new-key", "x.key", "--cn", "x", "--usages", "client-auth,serverauth"}, wantErr: `--usages: "serverauth" is not a usage`},
		"duration too short":   {args: []string{"x", "--signer", "example.com/s", "--new-key", "x.key", "--cn", "x", "--duration", "5m"}, wantErr: "--duration 5m0s: the shortest"},
		"bad wait":             {args: []string{"x", "--signer", "example.com/s", "--new-key", "x.key", "--cn", "x", "--wait=soon"}, wantErr: `--wait "soon" is not a positive duration`, wantGone: []string{"x.key"}},
		"bad ip":               {args: []string{"x", "--signer", "example.com/s", "--new-key", "x.key", "--cn", "x", "--ip", "10.0.0.300"}, wantErr: `--ip "10.0.0.300" is not an IP address`},
		"bad subject":          {args: []string{"x", "--signer", "example.com/s", "--new-key", "x.key", "--subject", "CN=x,XX=y"}, wantErr: `attribute "XX" is not one of CN, O, OU`},
		"cn twice":             {args: []string{"x", "--signer", "example.com/s", "--new-key", "x.key", "--subject", "CN=x", "--cn", "y"}, wantErr: "give the common name once"},
		"new key with key":     {args: []string{"x", "--signer", "example.com/s", "--new-key", "x.key", "--key", "y.key"}, wantErr: "--new-key makes the key"},
		"dry run with approve": {args: []string{"x", "--signer", "example.com/s", "--new-key", "x.key", "--cn", "x", "--dry-run", "--approve"}, wantErr: "--dry-run creates nothing"},
		"bad key type":         {args: []string{"x", "--signer", "example.com/s", "--new-key", "x.key", "--cn", "x", "--key-type", "dsa"}, wantErr: `--key-type "dsa": one of ecdsa-p256`},
		"csr with subject":     {args: []string{"x", "--signer", "example.com/s", "--csr", "x.csr", "--cn", "x"}, files: map[string]string{"x.csr": string(otherRequest)}, wantErr: "--csr is sent as it is"},
		"csr not for the key":  {args: []string{"x", "--signer", "example.com/s", "--csr", "x.csr", "--key", "y.key"}, files: map[string]string{"x.csr": string(otherRequest), "y.key": mustKeyPEM(t)}, wantErr: "is for a ECDSA P-256 key that is not --key y.key"},
		"csr not a csr":        {args: []string{"x", "--signer", "example.com/s", "--csr", "x.csr"}, files: map[string]string{"x.csr": "hello"}, wantErr: "--csr x.csr"},
		"kubeconfig needs key": {args: []string{"x", "--signer", "example.com/s", "--csr", "x.csr", "--kubeconfig-out", "k"}, files: map[string]string{"x.csr": string(otherRequest)}, wantErr: "--kubeconfig-out needs the private key"},
		"key not a key":        {args: []string{"x", "--signer", "example.com/s", "--key", "y.key", "--cn", "x"}, files: map[string]string{"y.key": "junk"}, wantErr: "--key y.key"},
		"encrypted key":        {args: []string{"x", "--signer", "example.com/s", "--key", "y.key", "--cn", "x"}, files: map[string]string{"y.key": "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAA==\n-----END ENCRYPTED PRIVATE KEY-----\n"}, wantErr: "the key is encrypted"},
		"out is the key": {
			args: []string{"x", "--signer", "example.com/s", "--key", "./y.key", "--cn", "x", "--out", "y.key"}, files: map[string]string{"y.key": string(otherKeyPEM)},
			wantErr: "--out y.key is the key file", wantKept: map[string]string{"y.key": string(otherKeyPEM)},
		},
		"kubeconfig exists": {
			args: []string{"x", "--signer", "example.com/s", "--new-key", "x.key", "--cn", "x", "--kubeconfig-out", "kc"}, files: map[string]string{"kc": "mine"},
			wantErr: "--kubeconfig-out kc exists; refusing to overwrite", wantGone: []string{"x.key"}, wantKept: map[string]string{"kc": "mine"},
		},
		"new key file exists, no request for it": {
			args: []string{"x", "--signer", "example.com/s", "--new-key", "x.key", "--cn", "x"}, files: map[string]string{"x.key": string(otherKeyPEM)},
			wantErr: "--new-key x.key exists; refusing to overwrite a private key: use --key x.key", wantKept: map[string]string{"x.key": string(otherKeyPEM)},
		},
		"name taken by another key": {
			args: []string{"taken", "--signer", "example.com/s", "--new-key", "t.key", "--cn", "t"}, wantErr: `"taken" exists already, for another key: choose another NAME, or renew it with "kubectl rekey renew taken"`,
			wantGone: []string{"t.key"},
		},
		"resumed request was denied": {
			args: []string{"denied", "--signer", "example.com/s", "--key", "o.key", "--cn", "taken"}, files: map[string]string{"o.key": string(otherKeyPEM)},
			wantErr: `certificatesigningrequest "denied" was Denied: reason NotOurs: ask the team lead`,
		},
		"the approval write fails it": {
			outcome: outcomeFail, args: []string{"f", "--signer", "example.com/s", "--new-key", "f.key", "--cn", "f", "--approve", "--wait=10s"},
			wantErr: `certificatesigningrequest "f" was Failed: reason SignerPolicyViolation: signer example.com/s refused the request: policy.allowedUsages`,
		},
		"a wait that times out names the request and what it waits for": {
			outcome: outcomeNothing, args: []string{"p", "--signer", "example.com/s", "--new-key", "p.key", "--cn", "p", "--wait=200ms"},
			wantErr: `timed out after 200ms waiting for the certificate of certificatesigningrequest "p": it is waiting for someone allowed to approve for signer "example.com/s" (kubectl rekey approve p)`,
		},
		"approved, nothing signs": {
			outcome: outcomeNothing, args: []string{"q", "--signer", "example.com/s", "--new-key", "q.key", "--cn", "q", "--approve", "--out", "q.crt", "--wait=200ms"},
			wantErr:  `waiting for the certificate of certificatesigningrequest "q": it is Approved but nothing has signed it yet (is there a Signer for "example.com/s"`,
			wantGone: []string{"q.crt"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for f, content := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			client := fakeServer(t, ca, tc.outcome, taken.DeepCopy(), denied.DeepCopy())
			r := runRequest(t, testDeps(client, nil), dir, tc.args...)
			if r.err == nil || !strings.Contains(r.err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q\nout %s\nerr %s", r.err, tc.wantErr, r.out, r.errOut)
			}
			for _, f := range tc.wantGone {
				if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
					t.Errorf("%s exists", f)
				}
			}
			for f, content := range tc.wantKept {
				if got, err := os.ReadFile(filepath.Join(dir, f)); err != nil || string(got) != content {
					t.Errorf("%s changed: %q, %v", f, got, err)
				}
			}
		})
	}
}

func mustKeyPEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	data, err := marshalPrivateKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestRequestResumes: the same command run again after an interruption
// (the request exists for the key in --new-key's file) takes the request
// up instead of failing, and keeps the key.
func TestRequestResumes(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "CA")
	client := fakeServer(t, ca, outcomeNothing)
	r := runRequest(t, testDeps(client, nil), dir, "r", "--signer", "example.com/s", "--new-key", "r.key", "--cn", "r")
	if r.err != nil || !strings.Contains(r.errOut, "no certificate yet: it is waiting for someone allowed to approve") {
		t.Fatalf("first run: %v\n%s%s", r.err, r.out, r.errOut)
	}
	keyBefore, _ := os.ReadFile(filepath.Join(dir, "r.key"))
	client2 := fakeServer(t, ca, outcomeIssue)
	existing, _ := client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), "r", metav1.GetOptions{})
	existing.Spec.Username = "alice" // as the server sets it; the fake does not
	if err := client2.Tracker().Add(existing); err != nil {
		t.Fatal(err)
	}
	r = runRequest(t, testDeps(client2, nil), dir, "r", "--signer", "example.com/s", "--new-key", "r.key", "--cn", "r", "--approve", "--wait", "--out", "r.crt")
	if r.err != nil || !strings.Contains(r.out, "r exists already for this key: taken up where it is") {
		t.Fatalf("second run: %v\n%s%s", r.err, r.out, r.errOut)
	}
	keyAfter, _ := os.ReadFile(filepath.Join(dir, "r.key"))
	if !bytes.Equal(keyBefore, keyAfter) {
		t.Fatal("the key file changed")
	}
	chain, err := os.ReadFile(filepath.Join(dir, "r.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if !signing.PublicKeysEqual(leafOf(t, chain).PublicKey, readKeyFile(t, filepath.Join(dir, "r.key")).Public()) {
		t.Fatal("certificate not for the key")
	}
}

// TestRequestResumesOnlyItsOwn: a request that exists already with the
// user's PKCS#10 bytes is not taken up, and never approved, when another
// user created it or its usages or lifetime are not the flags' (review
// #32 finding 6: Mallory pre-creates NAME with Alice's request and her own
// usages; Alice's --approve must not approve Mallory's spec).
func TestRequestResumesOnlyItsOwn(t *testing.T) {
	ca := newTestCA(t, "CA")
	hour := int32(3600)
	tests := map[string]struct {
		username string
		usages   []certv1alpha1.KeyUsage
		seconds  *int32
		whoErr   error
		want     string
	}{
		"created by another user": {username: "mallory", want: `created by user "mallory", not by you ("alice")`},
		"other usages":            {username: "alice", usages: []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageServerAuth}, want: "with usages"},
		"another lifetime":        {username: "alice", seconds: &hour, want: "asking for 1h0m0s, not the signer's default lifetime"},
		"who am I unknown":        {username: "alice", whoErr: errors.New("the server could not find the requested resource"), want: "could not be read"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "alice.key"), []byte(mustKeyPEM(t)), 0o600); err != nil {
				t.Fatal(err)
			}
			key := readKeyFile(t, filepath.Join(dir, "alice.key"))
			request, err := createRequestPEM(mustTemplate(t, "CN=alice"), key)
			if err != nil {
				t.Fatal(err)
			}
			usages := tc.usages
			if usages == nil {
				usages = []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth, certv1alpha1.UsageDigitalSignature}
			}
			preexisting := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: certv1alpha1.CertificateSigningRequestSpec{
				Request: request, SignerName: "example.com/s", Username: tc.username, Usages: usages, ExpirationSeconds: tc.seconds}}
			client := fakeServer(t, ca, outcomeIssue, preexisting)
			deps := testDeps(client, nil)
			if tc.whoErr != nil {
				deps.whoAmI = func(context.Context) (string, error) { return "", tc.whoErr }
			}
			r := runRequest(t, deps, dir, "r", "--signer", "example.com/s", "--key", "alice.key", "--cn", "alice", "--approve", "--wait=1m", "--out", "r.crt")
			if r.err == nil || !strings.Contains(r.err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q\n%s%s", r.err, tc.want, r.out, r.errOut)
			}
			for _, a := range client.Actions() {
				if a.GetVerb() == "update" {
					t.Fatalf("the request was written (%s %s): it must not be approved", a.GetVerb(), a.GetSubresource())
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "r.crt")); err == nil {
				t.Fatal("a certificate was written")
			}
		})
	}
}

// TestRequestOutNeverOverwritesTheKey: --out naming the key by another
// path, a symlink or a hard link is refused before anything is created,
// and an --out symlink (dangling towards the new key, or to another file)
// is replaced rather than written through (review #32 finding 7).
func TestRequestOutNeverOverwritesTheKey(t *testing.T) {
	ca := newTestCA(t, "CA")
	keyPEM := mustKeyPEM(t)
	refused := map[string]func(t *testing.T, dir string) string{
		"absolute path": func(t *testing.T, dir string) string { return filepath.Join(dir, "y.key") },
		"symlink": func(t *testing.T, dir string) string {
			if err := os.Symlink("y.key", filepath.Join(dir, "link.crt")); err != nil {
				t.Fatal(err)
			}
			return "link.crt"
		},
		"hard link": func(t *testing.T, dir string) string {
			if err := os.Link(filepath.Join(dir, "y.key"), filepath.Join(dir, "hard.crt")); err != nil {
				t.Fatal(err)
			}
			return "hard.crt"
		},
	}
	for name, out := range refused {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "y.key"), []byte(keyPEM), 0o600); err != nil {
				t.Fatal(err)
			}
			client := fakeServer(t, ca, outcomeIssue)
			r := runRequest(t, testDeps(client, nil), dir, "x", "--signer", "example.com/s", "--key", "y.key", "--cn", "x", "--approve", "--out", out(t, dir))
			if r.err == nil || !strings.Contains(r.err.Error(), "is the key file") {
				t.Fatalf("error %v\n%s%s", r.err, r.out, r.errOut)
			}
			if got, _ := os.ReadFile(filepath.Join(dir, "y.key")); string(got) != keyPEM {
				t.Fatalf("the key changed: %q", got)
			}
			if len(client.Actions()) != 0 {
				t.Fatalf("refused after talking to the server: %v", client.Actions())
			}
		})
	}
	t.Run("symlinks are replaced, not written through", func(t *testing.T) {
		dir := t.TempDir()
		// Dangling towards the key the command makes, and towards a file
		// of the user's.
		if err := os.Symlink("n.key", filepath.Join(dir, "n.crt")); err != nil {
			t.Fatal(err)
		}
		client := fakeServer(t, ca, outcomeIssue)
		r := runRequest(t, testDeps(client, nil), dir, "n", "--signer", "example.com/s", "--new-key", "n.key", "--cn", "n", "--approve", "--out", "n.crt")
		if r.err != nil {
			t.Fatalf("%v\n%s%s", r.err, r.out, r.errOut)
		}
		readKeyFile(t, filepath.Join(dir, "n.key")) // still the key
		if info, err := os.Lstat(filepath.Join(dir, "n.crt")); err != nil || !info.Mode().IsRegular() {
			t.Fatalf("--out is not a regular file: %v %v", info, err)
		}

		if err := os.WriteFile(filepath.Join(dir, "precious"), []byte("mine"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("precious", filepath.Join(dir, "m.crt")); err != nil {
			t.Fatal(err)
		}
		r = runRequest(t, testDeps(client, nil), dir, "m", "--signer", "example.com/s", "--new-key", "m.key", "--cn", "m", "--approve", "--out", "m.crt")
		if r.err != nil {
			t.Fatalf("%v\n%s%s", r.err, r.out, r.errOut)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "precious")); string(got) != "mine" {
			t.Fatalf("written through the symlink: %q", got)
		}
		chain, err := os.ReadFile(filepath.Join(dir, "m.crt"))
		if err != nil {
			t.Fatal(err)
		}
		leafOf(t, chain)
	})
}

// TestRequestFromCSRFile sends a PKCS#10 file as it is.
func TestRequestFromCSRFile(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csrPEM, err := createRequestPEM(&x509.CertificateRequest{Subject: pkix.Name{CommonName: "app", OrganizationalUnit: []string{"ops"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app.csr"), csrPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	client := fakeServer(t, newTestCA(t, "CA"), outcomeNothing)
	r := runRequest(t, testDeps(client, nil), dir, "app", "--signer", "example.com/s", "--csr", "app.csr")
	if r.err != nil {
		t.Fatal(r.err)
	}
	stored, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), "app", metav1.GetOptions{})
	if err != nil || !bytes.Equal(stored.Spec.Request, csrPEM) {
		t.Fatalf("stored request differs: %v", err)
	}
}

func TestRequestDryRun(t *testing.T) {
	would := certv1alpha1.DryRunWarningPrefix + `signer "example.com/s"` + certv1alpha1.DryRunWouldIssue + `subject "CN=web"; usages server auth; lifetime 24h0m0s (until about 2030-01-01T00:00:00Z)`
	refuse := certv1alpha1.DryRunWarningPrefix + `signer "example.com/s" would refuse: reason SignerPolicyViolation: policy.allowedUsages: usage "server auth" is not allowed`
	tests := map[string]struct {
		warnings   []string
		wantErr    bool
		wantOut    []string
		wantErrOut []string
	}{
		"would issue": {warnings: []string{"another warning", would}, wantOut: []string{"web (dry run: nothing was created)", "requester: alice", `signer "example.com/s" would issue:`, "    usages server auth\n", "    lifetime 24h0m0s"},
			wantErrOut: []string{"Warning: another warning"}},
		// An older server puts "; " inside a parenthesised clause: the
		// clause stays on its field's line.
		"semicolon in parentheses": {warnings: []string{certv1alpha1.DryRunWarningPrefix + `signer "example.com/s"` + certv1alpha1.DryRunWouldIssue + `lifetime 720h0m0s (capped by spec.policy.maxDuration 720h0m0s; asked 9000h0m0s); usages server auth`},
			wantOut: []string{"    lifetime 720h0m0s (capped by spec.policy.maxDuration 720h0m0s; asked 9000h0m0s)\n", "    usages server auth\n"}},
		"would refuse": {warnings: []string{refuse}, wantErr: true, wantErrOut: []string{`error: signer "example.com/s" would refuse: reason SignerPolicyViolation: policy.allowedUsages`}},
		"no decision":  {wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			client := fake.NewSimpleClientset()
			r := runRequest(t, testDeps(client, tc.warnings), dir, "web", "--signer", "example.com/s", "--new-key", "web.key", "--cn", "web", "--usages", "server auth", "--dry-run")
			if (r.err != nil) != tc.wantErr {
				t.Fatalf("error %v\n%s%s", r.err, r.out, r.errOut)
			}
			if name == "no decision" && !strings.Contains(r.err.Error(), "the server gave no decision") {
				t.Fatal(r.err)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(r.out, w) {
					t.Errorf("out lacks %q:\n%s", w, r.out)
				}
			}
			for _, w := range tc.wantErrOut {
				if !strings.Contains(r.errOut, w) {
					t.Errorf("errOut lacks %q:\n%s", w, r.errOut)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "web.key")); !os.IsNotExist(err) {
				t.Error("a dry run wrote the key")
			}
			if len(client.Actions()) != 0 {
				t.Errorf("a dry run used the plain client: %v", client.Actions())
			}
		})
	}
}

func TestParseSubject(t *testing.T) {
	for in, want := range map[string]string{
		"CN=alice,O=dev,O=ops":           "CN=alice,O=dev+O=ops",
		"/CN=alice/O=dev/OU=team a":      "CN=alice,OU=team a,O=dev",
		`CN=a\,b, C=DE ,L=Berlin`:        `CN=a\,b,L=Berlin,C=DE`,
		"cn=x,serialNumber=7,ST=Bavaria": "SERIALNUMBER=7,CN=x,ST=Bavaria",
	} {
		got, err := parseSubject(in)
		if err != nil || got.String() != want {
			t.Errorf("parseSubject(%q) = %q, %v; want %q", in, got.String(), err, want)
		}
	}
	for _, bad := range []string{"CN", "CN=a,CN=b", "FOO=x", "CN="} {
		if _, err := parseSubject(bad); err == nil {
			t.Errorf("parseSubject(%q) accepted", bad)
		}
	}
}
