package plugin

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	k8stesting "k8s.io/client-go/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	"rekey.io/rekey/pkg/signing"
)

func runRenew(t *testing.T, client *fake.Clientset, dir string, args ...string) runResult {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRenewCommand(testDeps(client, nil), genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(args)
	t.Chdir(dir)
	err := cmd.ExecuteContext(context.Background())
	return runResult{out.String(), errOut.String(), err}
}

func TestRenew(t *testing.T) {
	ca := newTestCA(t, "CA")
	oldKey, err := parsePrivateKeyPEM("k", "k", []byte(mustKeyPEM(t)))
	if err != nil {
		t.Fatal(err)
	}
	oldRequest, err := createRequestPEM(mustTemplate(t, "/CN=alice/OU=team a/O=dev", "alice.example.com"), oldKey)
	if err != nil {
		t.Fatal(err)
	}
	seconds := int32(7200)
	old := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "alice"},
		Spec: certv1alpha1.CertificateSigningRequestSpec{Request: oldRequest, SignerName: "example.com/s", ExpirationSeconds: &seconds,
			Usages: []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth}, Username: "alice"},
		Status: certv1alpha1.CertificateSigningRequestStatus{Certificate: ca.issue(t, oldRequest)}}
	attested := old.DeepCopy()
	attested.Name = "node-a"
	attested.Spec.Request = append(append([]byte(nil), oldRequest...), []byte("-----BEGIN TPM ATTESTATION-----\nAA==\n-----END TPM ATTESTATION-----\n")...)

	newFake := func() *fake.Clientset {
		client := fakeServer(t, ca, outcomeIssue, old.DeepCopy(), attested.DeepCopy())
		// The server names a generateName request; the fake does not.
		client.PrependReactor("create", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
			csr := a.(k8stesting.CreateAction).GetObject().(*certv1alpha1.CertificateSigningRequest)
			if csr.Name == "" {
				csr.Name = csr.GenerateName + "x7k2p"
			}
			return false, nil, nil
		})
		return client
	}
	sameTemplate := func(t *testing.T, csr *certv1alpha1.CertificateSigningRequest) {
		t.Helper()
		if csr.Spec.SignerName != old.Spec.SignerName || *csr.Spec.ExpirationSeconds != seconds || len(csr.Spec.Usages) != 2 || csr.Spec.Usages[1] != certv1alpha1.UsageClientAuth {
			t.Fatalf("spec not copied: %+v", csr.Spec)
		}
		got, err := requestOf(csr)
		if err != nil {
			t.Fatal(err)
		}
		was, _ := requestOf(old)
		if !bytes.Equal(got.RawSubject, was.RawSubject) || strings.Join(got.DNSNames, ",") != "alice.example.com" {
			t.Fatalf("template not copied: %s %v", got.Subject, got.DNSNames)
		}
	}

	t.Run("same key, generated name", func(t *testing.T) {
		client := newFake()
		r := runRenew(t, client, t.TempDir(), "alice")
		if r.err != nil || !strings.Contains(r.errOut, "alice-x7k2p created") {
			t.Fatalf("%v\n%s%s", r.err, r.out, r.errOut)
		}
		csr, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), "alice-x7k2p", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(csr.Spec.Request, oldRequest) {
			t.Fatal("without a key option, the new request must be the old PKCS#10 request")
		}
		sameTemplate(t, csr)
	})
	t.Run("new key, named, approved, written", func(t *testing.T) {
		dir := t.TempDir()
		client := newFake()
		r := runRenew(t, client, dir, "alice", "--name", "alice-2027", "--new-key", "new.key", "--approve", "--wait", "--out", "new.crt")
		if r.err != nil {
			t.Fatalf("%v\n%s%s", r.err, r.out, r.errOut)
		}
		csr, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), "alice-2027", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sameTemplate(t, csr)
		if sameKey(csr.Spec.Request, oldKey) {
			t.Fatal("--new-key renewed with the old key")
		}
		st, err := os.Stat(filepath.Join(dir, "new.key"))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("key file %v %v", st, err)
		}
		newKey := readKeyFile(t, filepath.Join(dir, "new.key"))
		chain, err := os.ReadFile(filepath.Join(dir, "new.crt"))
		if err != nil {
			t.Fatal(err)
		}
		if !signing.PublicKeysEqual(leafOf(t, chain).PublicKey, newKey.Public()) {
			t.Fatal("the certificate is not for the new key")
		}
		if _, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), "alice", metav1.GetOptions{}); err != nil {
			t.Fatal("the old request is gone")
		}
	})

	for name, tc := range map[string]struct {
		args    []string
		files   map[string]string
		wantErr string
	}{
		"missing request":          {args: []string{"nope"}, wantErr: `cannot read certificatesigningrequest "nope"`},
		"attested request":         {args: []string{"node-a"}, wantErr: `"node-a" carries TPM attestation evidence`},
		"new key file exists":      {args: []string{"alice", "--new-key", "k"}, files: map[string]string{"k": "mine"}, wantErr: "--new-key k exists; refusing to overwrite"},
		"new key and key":          {args: []string{"alice", "--new-key", "k", "--key", "j"}, wantErr: "--new-key makes the key"},
		"kubeconfig without a key": {args: []string{"alice", "--kubeconfig-out", "kc"}, wantErr: "--kubeconfig-out needs the private key"},
		"name taken":               {args: []string{"alice", "--name", "node-a"}, wantErr: `cannot create certificatesigningrequest "node-a"`},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for f, content := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r := runRenew(t, newFake(), dir, tc.args...)
			if r.err == nil || !strings.Contains(r.err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", r.err, tc.wantErr)
			}
			for f, content := range tc.files {
				if got, _ := os.ReadFile(filepath.Join(dir, f)); string(got) != content {
					t.Errorf("%s changed", f)
				}
			}
		})
	}
}
