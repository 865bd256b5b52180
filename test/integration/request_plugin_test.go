package integration

import (
	"context"
	"crypto"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/keyutil"

	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/test/framework"
)

// TestKubectlRekeyRequest runs `kubectl rekey request` against a
// standalone server: one command makes a key (mode 0600), creates the
// request, approves it, waits and writes a certificate that verifies
// against the CA's trust bundle and certifies that key, and a kubeconfig
// holding both. A dry run gets the server's policy decision (what it
// would issue, or the rule it breaks) and creates nothing; inspect says
// which CA key issued the certificate.
func TestKubectlRekeyRequest(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	plugin := framework.Binary(t, "kubectl-rekey")
	env := []string{"PATH=" + filepath.Dir(plugin) + string(os.PathListSeparator) + os.Getenv("PATH")}
	run := func(args ...string) (string, string, error) {
		return framework.RunKubectlWithEnv(t, srv.Kubeconfig, env, nil, append([]string{"rekey"}, args...)...)
	}
	const signer, caName = "rekey.io/kube-apiserver-client", "rekey.io-kube-apiserver-client"
	dir := t.TempDir()
	keyFile, certFile, kubeconfigFile := filepath.Join(dir, "alice.key"), filepath.Join(dir, "alice.crt"), filepath.Join(dir, "alice.kubeconfig")

	out, errOut, err := run("request", "plugin-alice", "--signer", signer, "--new-key", keyFile, "--cn", "plugin-alice", "--org", "dev",
		"--duration", "24h", "--approve", "--wait=2m", "--out", certFile, "--kubeconfig-out", kubeconfigFile)
	if err != nil || !strings.Contains(out, "certificate written to "+certFile) {
		t.Fatalf("request: %v\nout %s\nerr %s", err, out, errOut)
	}
	st, err := os.Stat(keyFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", st, err)
	}
	keyAny, err := keyutil.PrivateKeyFromFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	key, ok := keyAny.(crypto.Signer)
	if !ok {
		t.Fatalf("--new-key wrote a %T", keyAny)
	}
	chain, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := validation.ParseCertificateChain(chain)
	if err != nil {
		t.Fatal(err)
	}
	leaf := certs[0]
	if !signing.PublicKeysEqual(leaf.PublicKey, key.Public()) {
		t.Fatal("the certificate does not certify the key written to --new-key")
	}
	if leaf.Subject.CommonName != "plugin-alice" || len(leaf.Subject.Organization) != 1 || leaf.Subject.Organization[0] != "dev" {
		t.Fatalf("subject %s", leaf.Subject)
	}
	ca, err := srv.Client.RotationV1alpha1().CertificateAuthorities().Get(context.Background(), caName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(ca.Status.TrustBundle)) {
		t.Fatalf("CA %s has no trust bundle", caName)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the certificate does not verify against the CA: %v", err)
	}
	kc, err := clientcmd.LoadFromFile(kubeconfigFile)
	if err != nil {
		t.Fatal(err)
	}
	user := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]
	if user == nil || string(user.ClientCertificateData) != string(chain) || len(user.ClientKeyData) == 0 || kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster].Server == "" {
		t.Fatalf("kubeconfig %+v", kc)
	}

	out, errOut, err = run("inspect", "plugin-alice")
	if err != nil || !strings.Contains(out, "Issuing CA:      "+caName+", its current key") || !strings.Contains(out, "Events:\n  none") {
		t.Fatalf("inspect: %v\nout %s\nerr %s", err, out, errOut)
	}

	// The dry run: the server's decision, as this user; nothing created
	// and no key written.
	dryKey := filepath.Join(dir, "dry.key")
	out, errOut, err = run("request", "plugin-dry", "--signer", signer, "--new-key", dryKey, "--cn", "plugin-dry", "--duration", "48h", "--dry-run")
	if err != nil || !strings.Contains(out, `signer "`+signer+`" would issue:`) || !strings.Contains(out, "lifetime 48h0m0s") || !strings.Contains(out, "(fingerprint SHA256:") || strings.Contains(out, `CA "`+caName+`"`) {
		t.Fatalf("dry run: %v\nout %s\nerr %s", err, out, errOut)
	}
	out, errOut, err = run("request", "plugin-dry", "--signer", signer, "--new-key", dryKey, "--cn", "plugin-dry", "--usages", "digital signature,server auth", "--dry-run")
	if err == nil || !strings.Contains(errOut, `would refuse: reason SignerPolicyViolation: policy.allowedUsages: usage "server auth" is not allowed`) {
		t.Fatalf("dry run of a request the policy refuses: %v\nout %s\nerr %s", err, out, errOut)
	}
	if _, err := srv.Client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), "plugin-dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a dry run created the request: %v", err)
	}
	if _, err := os.Stat(dryKey); !os.IsNotExist(err) {
		t.Fatal("a dry run wrote a key")
	}
}
