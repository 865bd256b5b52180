package plugin

import (
	"bytes"
	"context"
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
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	k8stesting "k8s.io/client-go/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
)

const teamSigner = "example.com/team-signer"

func request(name string, conds ...certv1alpha1.RequestConditionType) *certv1alpha1.CertificateSigningRequest {
	csr := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name, UID: k8stypes.UID("uid-" + name), ResourceVersion: "1"},
		Spec: certv1alpha1.CertificateSigningRequestSpec{SignerName: teamSigner}}
	for _, c := range conds {
		csr.Status.Conditions = append(csr.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{Type: c, Status: metav1.ConditionTrue})
	}
	return csr
}

// readySigner and readyCA serve teamSigner.
func readySigner() *certv1alpha1.Signer {
	return &certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: "example.com:team-signer"},
		Spec:   certv1alpha1.SignerSpec{SignerName: teamSigner, CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "team-ca"}},
		Status: certv1alpha1.SignerStatus{Conditions: []metav1.Condition{{Type: certv1alpha1.SignerReady, Status: metav1.ConditionTrue, Reason: "CAReady"}}}}
}

func readyCA() *rotationv1alpha1.CertificateAuthority {
	return &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "team-ca"},
		Status: rotationv1alpha1.CertificateAuthorityStatus{Current: caCert(fpOld),
			Conditions: []metav1.Condition{{Type: rotationv1alpha1.CertificateAuthorityReady, Status: metav1.ConditionTrue, Reason: "KeyAvailable"}}}}
}

// runDecision runs approve or deny against client with stdin and returns
// stdout, stderr and the error.
func runDecision(t *testing.T, d decision, client clientset.Interface, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newDecisionCommand(d, func() (clientset.Interface, error) { return client, nil },
		genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut})
	// As under the root command: errors are printed by main.
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// approvalWrites are the /approval updates a client saw.
func approvalWrites(t *testing.T, client *fake.Clientset) []k8stesting.UpdateActionImpl {
	t.Helper()
	var writes []k8stesting.UpdateActionImpl
	for _, a := range client.Actions() {
		if a.GetVerb() != "update" {
			continue
		}
		if a.GetSubresource() != "approval" {
			t.Fatalf("wrote %q, want only /approval", a.GetSubresource())
		}
		writes = append(writes, a.(k8stesting.UpdateActionImpl))
	}
	return writes
}

func TestDecision(t *testing.T) {
	tests := map[string]struct {
		args        []string
		wantErr     bool
		wantOut     string
		wantErrOut  string
		wantUpdates int
	}{
		"approve a pending request":      {args: []string{"pending", "--reason=Checked", "--message=by hand", "--wait=0"}, wantOut: "pending approved", wantUpdates: 1},
		"already approved: no change":    {args: []string{"approved", "--wait=0"}, wantOut: "approved approved (no change)"},
		"denied cannot be approved":      {args: []string{"denied"}, wantErr: true, wantErrOut: "already denied"},
		"missing request":                {args: []string{"nope"}, wantErr: true, wantErrOut: `cannot approve certificatesigningrequest "nope"`},
		"several, one failing, all seen": {args: []string{"nope", "pending", "--wait=0"}, wantErr: true, wantOut: "pending approved", wantErrOut: "nope", wantUpdates: 1},
		"no names":                       {args: nil, wantErr: true},
		"bad output":                     {args: []string{"pending", "-o", "yaml"}, wantErr: true},
		"bad dry run":                    {args: []string{"pending", "--dry-run=maybe"}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			client := fake.NewSimpleClientset(request("pending"), request("denied", certv1alpha1.CertificateDenied), request("approved", certv1alpha1.CertificateApproved), readySigner(), readyCA())
			out, errOut, err := runDecision(t, decisionApprove, client, "", tc.args...)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v", err)
			}
			if !strings.Contains(out, tc.wantOut) || !strings.Contains(errOut, tc.wantErrOut) {
				t.Fatalf("out %q, errOut %q", out, errOut)
			}
			writes := approvalWrites(t, client)
			for _, w := range writes {
				c := w.GetObject().(*certv1alpha1.CertificateSigningRequest).Status.Conditions
				if last := c[len(c)-1]; last.Type != certv1alpha1.CertificateApproved || last.Status != metav1.ConditionTrue {
					t.Fatalf("condition %+v", last)
				}
			}
			if len(writes) != tc.wantUpdates {
				t.Fatalf("%d updates, want %d", len(writes), tc.wantUpdates)
			}
		})
	}
}

// TestDecisionSeveralNamesOutputName: -o name prints one kubectl name per
// request and nothing else on standard output.
func TestDecisionSeveralNamesOutputName(t *testing.T) {
	client := fake.NewSimpleClientset(request("a"), request("b"), request("c"))
	out, errOut, err := runDecision(t, decisionDeny, client, "", "a", "b", "c", "a", "-o", "name")
	if err != nil {
		t.Fatalf("error %v, stderr %q", err, errOut)
	}
	want := "certificatesigningrequest.certificates.rekey.io/a\ncertificatesigningrequest.certificates.rekey.io/b\ncertificatesigningrequest.certificates.rekey.io/c\n"
	if out != want {
		t.Fatalf("stdout %q, want %q", out, want)
	}
	if n := len(approvalWrites(t, client)); n != 3 {
		t.Fatalf("%d writes, want 3 (a named twice is decided once)", n)
	}
}

// TestDecisionFromFiles: -f takes files (several documents, Lists),
// directories and standard input, and refuses objects that are not rekey
// requests, naming them.
func TestDecisionFromFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	multi := write("multi.yaml", `apiVersion: certificates.rekey.io/v1alpha1
kind: CertificateSigningRequest
metadata:
  name: a
---
---
apiVersion: v1
kind: List
items:
- apiVersion: certificates.rekey.io/v1alpha1
  kind: CertificateSigningRequest
  metadata: {name: b}
`)
	write("sub/c.json", `{"apiVersion":"certificates.rekey.io/v1alpha1","kind":"CertificateSigningRequest","metadata":{"name":"c"}}`)
	write("sub/deeper/d.yml", "apiVersion: certificates.rekey.io/v1alpha1\nkind: CertificateSigningRequest\nmetadata: {name: d}\n")
	write("sub/notes.txt", "not a resource")
	hostCSR := write("host.yaml", "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata: {name: x}\n")
	pod := write("pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n")
	generated := write("gen.yaml", "apiVersion: certificates.rekey.io/v1alpha1\nkind: CertificateSigningRequest\nmetadata: {generateName: alice-}\n")

	for name, tc := range map[string]struct {
		args      []string
		stdin     string
		wantNames []string
		wantErr   string
	}{
		"documents and a List": {args: []string{"-f", multi}, wantNames: []string{"a", "b"}},
		"a directory":          {args: []string{"-f", filepath.Join(dir, "sub")}, wantNames: []string{"c"}},
		"a directory, -R":      {args: []string{"-f", filepath.Join(dir, "sub"), "-R"}, wantNames: []string{"c", "d"}},
		"stdin and a name":     {args: []string{"e", "-f", "-"}, stdin: "apiVersion: certificates.rekey.io/v1alpha1\nkind: CertificateSigningRequest\nmetadata: {name: a}\n", wantNames: []string{"e", "a"}},
		"a host cluster CSR":   {args: []string{"-f", hostCSR}, wantErr: `certificates.k8s.io/v1 CertificateSigningRequest "x" is the host cluster's, not rekey's: kubectl certificate approve|deny decides those`},
		"another kind":         {args: []string{"-f", pod}, wantErr: `v1 Pod "web" is not a CertificateSigningRequest of certificates.rekey.io`},
		"no name":              {args: []string{"-f", generated}, wantErr: `without metadata.name (generateName "alice-")`},
		"missing file":         {args: []string{"-f", filepath.Join(dir, "nope.yaml")}, wantErr: "no such file"},
		"not YAML":             {args: []string{"-f", "-"}, stdin: "{{{", wantErr: "standard input: document 1"},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewSimpleClientset(request("a"), request("b"), request("c"), request("d"), request("e"))
			out, errOut, err := runDecision(t, decisionApprove, client, tc.stdin, append(tc.args, "-o", "name", "--wait=0")...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				if n := len(approvalWrites(t, client)); n != 0 {
					t.Fatalf("%d writes after a bad -f, want none", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("error %v, stderr %q", err, errOut)
			}
			var want string
			for _, n := range tc.wantNames {
				want += requestResource + n + "\n"
			}
			if out != want {
				t.Fatalf("stdout %q, want %q", out, want)
			}
		})
	}
}

// TestDecisionDryRun: server sends the write with dryRun=All, client
// sends none; both say so.
func TestDecisionDryRun(t *testing.T) {
	for _, tc := range []struct {
		flag       string
		wantWrites int
		wantOut    string
	}{
		{"--dry-run=server", 1, requestResource + "pending approved (server dry run)\n"},
		{"--dry-run", 1, requestResource + "pending approved (server dry run)\n"},
		{"--dry-run=client", 0, requestResource + "pending approved (dry run)\n"},
		{"--dry-run=none", 1, requestResource + "pending approved; not issued yet: "},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			client := fake.NewSimpleClientset(request("pending"), readySigner(), readyCA())
			out, errOut, err := runDecision(t, decisionApprove, client, "", "pending", tc.flag, "--wait=0")
			if err != nil {
				t.Fatalf("error %v, stderr %q", err, errOut)
			}
			if !strings.HasPrefix(out, tc.wantOut) {
				t.Fatalf("stdout %q, want %q", out, tc.wantOut)
			}
			writes := approvalWrites(t, client)
			if len(writes) != tc.wantWrites {
				t.Fatalf("%d writes, want %d", len(writes), tc.wantWrites)
			}
			for _, w := range writes {
				dry := w.UpdateOptions.DryRun
				if want := tc.flag != "--dry-run=none"; want != (len(dry) == 1 && dry[0] == metav1.DryRunAll) {
					t.Fatalf("DryRun %v for %s", dry, tc.flag)
				}
			}
		})
	}
}

func testCertificate(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	notAfter := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "alice"}, NotAfter: notAfter}, &x509.Certificate{SerialNumber: big.NewInt(2)}, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func withCertificate(csr *certv1alpha1.CertificateSigningRequest, cert []byte) *certv1alpha1.CertificateSigningRequest {
	csr = csr.DeepCopy()
	csr.Status.Certificate = cert
	return csr
}

func withFailed(csr *certv1alpha1.CertificateSigningRequest) *certv1alpha1.CertificateSigningRequest {
	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{Type: certv1alpha1.CertificateFailed, Status: metav1.ConditionTrue,
		Reason: "SignerPolicyViolation", Message: `usage "server auth" is not in the signer's allowedUsages`})
	return csr
}

// signInApprovalWrite makes the fake answer an approval as rekey does for
// a signer it serves: with the outcome in the same write.
func signInApprovalWrite(client *fake.Clientset, outcome func(*certv1alpha1.CertificateSigningRequest) *certv1alpha1.CertificateSigningRequest) {
	client.PrependReactor("update", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "approval" {
			return false, nil, nil
		}
		return true, outcome(a.(k8stesting.UpdateAction).GetObject().(*certv1alpha1.CertificateSigningRequest)), nil
	})
}

// signAfterApproval makes the fake's watch bring the outcome after the
// approval, as rekey's signer controller writes it.
func signAfterApproval(client *fake.Clientset, outcome func(*certv1alpha1.CertificateSigningRequest) *certv1alpha1.CertificateSigningRequest) {
	client.PrependWatchReactor("certificatesigningrequests", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewRaceFreeFake()
		w.Add(request("someone-else"))
		w.Modify(outcome(request("pending", certv1alpha1.CertificateApproved)))
		return true, w, nil
	})
}

// TestApproveOutcome: approve prints the certificate whether the approval
// write or the signer controller shortly after issued it, and exits
// non-zero with the rule when the request Failed.
func TestApproveOutcome(t *testing.T) {
	cert := testCertificate(t)
	issued := func(csr *certv1alpha1.CertificateSigningRequest) *certv1alpha1.CertificateSigningRequest {
		return withCertificate(csr, cert)
	}
	const rule = `certificatesigningrequest "pending" was approved but Failed: SignerPolicyViolation: usage "server auth" is not in the signer's allowedUsages`
	for name, tc := range map[string]struct {
		setup      func(*fake.Clientset)
		args       []string
		wantErr    bool
		wantOut    string
		wantErrOut string
	}{
		"issued in the write": {setup: func(c *fake.Clientset) { signInApprovalWrite(c, issued) },
			wantOut: requestResource + `pending approved; issued to "CN=alice", valid until 2027-01-02T03:04:05Z` + "\n"},
		"issued shortly after": {setup: func(c *fake.Clientset) { signAfterApproval(c, issued) },
			wantOut: requestResource + `pending approved; issued to "CN=alice", valid until 2027-01-02T03:04:05Z` + "\n"},
		"failed in the write": {setup: func(c *fake.Clientset) { signInApprovalWrite(c, withFailed) }, wantErr: true,
			wantOut: requestResource + "pending approved\n", wantErrOut: "error: " + rule + "\n"},
		"failed shortly after": {setup: func(c *fake.Clientset) { signAfterApproval(c, withFailed) }, wantErr: true,
			wantOut: requestResource + "pending approved\n", wantErrOut: "error: " + rule + "\n"},
		"issued, -o name": {setup: func(c *fake.Clientset) { signInApprovalWrite(c, issued) }, args: []string{"-o", "name"},
			wantOut: requestResource + "pending\n"},
		"failed, -o name": {setup: func(c *fake.Clientset) { signInApprovalWrite(c, withFailed) }, args: []string{"-o", "name"}, wantErr: true,
			wantOut: requestResource + "pending\n", wantErrOut: "error: " + rule + "\n"},
		"failed already, approved again": {setup: func(c *fake.Clientset) {
			_ = c.Tracker().Update(certv1alpha1.SchemeGroupVersion.WithResource("certificatesigningrequests"), withFailed(request("pending", certv1alpha1.CertificateApproved)), "")
		}, wantErr: true, wantOut: requestResource + "pending approved (no change)\n", wantErrOut: rule},
		"issued after the watch ended": {setup: func(c *fake.Clientset) {
			// The first watch ends at once, as a server's may; the request,
			// read again, has its certificate.
			c.PrependWatchReactor("certificatesigningrequests", func(k8stesting.Action) (bool, watch.Interface, error) {
				w := watch.NewRaceFreeFake()
				_ = c.Tracker().Update(certv1alpha1.SchemeGroupVersion.WithResource("certificatesigningrequests"), issued(request("pending", certv1alpha1.CertificateApproved)), "")
				w.Stop()
				return true, w, nil
			})
		}, wantOut: requestResource + `pending approved; issued to "CN=alice", valid until 2027-01-02T03:04:05Z` + "\n"},
		"may not watch": {setup: func(c *fake.Clientset) {
			c.PrependWatchReactor("certificatesigningrequests", func(k8stesting.Action) (bool, watch.Interface, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "certificates.rekey.io", Resource: "certificatesigningrequests"}, "", errors.New("no watch"))
			})
		}, wantOut: requestResource + `pending approved; not issued yet: cannot wait for the certificate (certificatesigningrequests.certificates.rekey.io is forbidden: no watch); Signer "example.com:team-signer" and CertificateAuthority "team-ca" are Ready` + "; the signer controller signs it when it can (kubectl get rcsr pending -w)\n"},
		"not issued within the wait": {setup: func(*fake.Clientset) {}, args: []string{"--wait=50ms"},
			wantOut: requestResource + `pending approved; not issued within 50ms: Signer "example.com:team-signer" and CertificateAuthority "team-ca" are Ready; the signer controller signs it when it can (kubectl get rcsr pending -w)` + "\n"},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewSimpleClientset(request("pending"), readySigner(), readyCA())
			tc.setup(client)
			out, errOut, err := runDecision(t, decisionApprove, client, "", append([]string{"pending", "--wait=10s"}, tc.args...)...)
			if (err != nil) != tc.wantErr || err != nil && !IsReported(err) {
				t.Fatalf("error %v, stderr %q", err, errOut)
			}
			if out != tc.wantOut || !strings.Contains(errOut, tc.wantErrOut) || tc.wantErrOut == "" && errOut != "" {
				t.Fatalf("stdout %q\nstderr %q\nwant stdout %q\nstderr %q", out, errOut, tc.wantOut, tc.wantErrOut)
			}
		})
	}
}

// TestApproveSaysWhyNothingSigns: when no certificate comes, approve
// names what keeps it from being signed.
func TestApproveSaysWhyNothingSigns(t *testing.T) {
	notReadySigner := readySigner()
	notReadySigner.Status.Conditions[0] = metav1.Condition{Type: certv1alpha1.SignerReady, Status: metav1.ConditionFalse, Reason: "CANotFound", Message: `CertificateAuthority "team-ca" does not exist`}
	unreachable := readyCA()
	unreachable.Status.Conditions[0] = metav1.Condition{Type: rotationv1alpha1.CertificateAuthorityReady, Status: metav1.ConditionFalse, Reason: "KeyStoreUnavailable", Message: "pkcs11: token not present"}
	keyless := readyCA()
	keyless.Status = rotationv1alpha1.CertificateAuthorityStatus{}
	preparing := readyCA()
	preparing.Status.Phase, preparing.Status.Next = rotationv1alpha1.PhasePreparing, caCert(fpNew)
	for name, tc := range map[string]struct {
		objects []runtime.Object
		want    string
	}{
		"no Signer": {nil,
			`no Signer serves signer name "example.com/team-signer", so rekey will not sign it: a signer outside rekey has to (or create a Signer for "example.com/team-signer")`},
		"Signer not Ready": {[]runtime.Object{notReadySigner},
			`Signer "example.com:team-signer" is not Ready (CANotFound): CertificateAuthority "team-ca" does not exist`},
		"no CA": {[]runtime.Object{readySigner()},
			`CertificateAuthority "team-ca" of Signer "example.com:team-signer" does not exist: rekey signs the request once it does`},
		"CA unreachable": {[]runtime.Object{readySigner(), unreachable},
			`CertificateAuthority "team-ca" is not Ready (KeyStoreUnavailable): pkcs11: token not present: rekey signs the request once it is`},
		"CA without a key": {[]runtime.Object{readySigner(), keyless},
			`CertificateAuthority "team-ca" has no key yet (it is being made): rekey signs the request once it has`},
		"CA Preparing": {[]runtime.Object{readySigner(), preparing},
			`CertificateAuthority "team-ca" is Preparing a rotation (its current CA still signs; kubectl rekey status team-ca shows the rotation)`},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewSimpleClientset(append(tc.objects, request("pending"))...)
			out, errOut, err := runDecision(t, decisionApprove, client, "", "pending", "--wait=0")
			if err != nil {
				t.Fatalf("error %v, stderr %q", err, errOut)
			}
			want := requestResource + "pending approved; not issued yet: " + tc.want
			if !strings.HasPrefix(out, want) {
				t.Fatalf("stdout %q\nwant    %q", out, want)
			}
			// With -o name the reason goes to standard error.
			client = fake.NewSimpleClientset(append(tc.objects, request("pending"))...)
			out, errOut, err = runDecision(t, decisionApprove, client, "", "pending", "--wait=0", "-o", "name")
			if err != nil || out != requestResource+"pending\n" || !strings.Contains(errOut, tc.want) {
				t.Fatalf("-o name: error %v, stdout %q, stderr %q", err, out, errOut)
			}
		})
	}
}

// TestApproveCannotTellWithoutPermission: a Signer the approver may not
// read is named, not guessed at.
func TestApproveCannotTellWithoutPermission(t *testing.T) {
	client := fake.NewSimpleClientset(request("pending"), readySigner())
	client.PrependReactor("get", "signers", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "certificates.rekey.io", Resource: "signers"}, "x", errors.New("no"))
	})
	out, _, err := runDecision(t, decisionApprove, client, "", "pending", "--wait=0")
	if err != nil || !strings.Contains(out, `not issued yet: cannot tell why: cannot read the Signer of "example.com/team-signer": signers.certificates.rekey.io "x" is forbidden`) {
		t.Fatalf("error %v, stdout %q", err, out)
	}
}

// TestApproveDoesNotWaitWhenNothingSigns: with no Signer serving the
// request's signer name rekey will not sign it, so approve explains at
// once instead of waiting out --wait.
func TestApproveDoesNotWaitWhenNothingSigns(t *testing.T) {
	client := fake.NewSimpleClientset(request("pending"))
	start := time.Now()
	out, errOut, err := runDecision(t, decisionApprove, client, "", "pending", "--wait=10s")
	if err != nil {
		t.Fatalf("error %v, stderr %q", err, errOut)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("approve waited %s for a request nothing will sign", took)
	}
	want := requestResource + `pending approved; not issued yet: no Signer serves signer name "example.com/team-signer"`
	if !strings.HasPrefix(out, want) {
		t.Fatalf("stdout %q\nwant    %q", out, want)
	}
}
