package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	"k8s.io/client-go/tools/clientcmd"

	"rekey.io/rekey/pkg/agent"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/standalone"
	"rekey.io/rekey/test/framework"
)

// bootstrapKubeconfig writes a kubeconfig for a bootstrapper
// (system:bootstrappers may ask for any node's client certificate).
func bootstrapKubeconfig(t *testing.T, srv *framework.Standalone) string {
	t.Helper()
	p := standalone.PKI{Dir: filepath.Join(srv.DataDir, "pki")}
	certPEM, keyPEM, err := p.IssueClientCertificate("system:bootstrap:abc123", []string{"system:bootstrappers"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bootstrap.kubeconfig")
	if err := p.WriteKubeconfig(path, srv.Config.Host, "bootstrap", certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	return path
}

func runAgent(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(framework.Binary(t, "rekey-agent"), args...).CombinedOutput()
	return string(out), err
}

func nodeRequests(t *testing.T, client clientset.Interface) []certv1alpha1.CertificateSigningRequest {
	t.Helper()
	list, err := client.CertificatesV1alpha1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []certv1alpha1.CertificateSigningRequest
	for _, csr := range list.Items {
		if strings.HasPrefix(csr.Name, "node-csr-") {
			out = append(out, csr)
		}
	}
	return out
}

// TestAgentBootstrapsFromNothing: `rekey-agent run --once` with a bootstrap
// kubeconfig gets a node client certificate (approved and signed in the
// create), writes the pair and the node's kubeconfig; a second run finds
// it current and asks nothing; exec-credential hands it out.
func TestAgentBootstrapsFromNothing(t *testing.T) {
	srv := framework.StartStandalone(t, t.TempDir())
	certDir, nodeKubeconfig := t.TempDir(), filepath.Join(t.TempDir(), "kubelet.kubeconfig")
	args := []string{"run", "--once", "--bootstrap-kubeconfig", bootstrapKubeconfig(t, srv), "--kubeconfig", nodeKubeconfig,
		"--cert-dir", certDir, "--node-name", "n1", "--wait-timeout", "60s"}
	start := time.Now()
	out, err := runAgent(t, args...)
	if err != nil {
		t.Fatalf("run --once: %v\n%s", err, out)
	}
	t.Logf("bootstrapped in %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	store := &agent.Store{Dir: certDir, Prefix: agent.PrefixClient}
	pair, err := store.Current()
	if err != nil {
		t.Fatal(err)
	}
	if pair.Leaf.Subject.CommonName != "system:node:n1" || pair.Leaf.Subject.Organization[0] != "system:nodes" {
		t.Fatalf("subject %v", pair.Leaf.Subject)
	}
	verifyChain(t, pair.Leaf, caOf(t, srv.Client, "rekey.io-kube-apiserver-client-kubelet"), x509.ExtKeyUsageClientAuth)
	requests := nodeRequests(t, srv.Client)
	if len(requests) != 1 || requests[0].Spec.Username != "system:bootstrap:abc123" || !hasCondition(&requests[0], certv1alpha1.CertificateApproved) {
		t.Fatalf("requests: %+v", requests)
	}

	// The node's kubeconfig reaches the bootstrap kubeconfig's server and
	// names the current pair file for certificate and key. (The standalone
	// server does not trust its kubelet-client CA for authentication; a
	// cluster's kube-apiserver does, and the e2e tests use it there.)
	cfg, err := clientcmd.BuildConfigFromFlags("", nodeKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != srv.Config.Host || cfg.TLSClientConfig.CertFile != store.CurrentPath() || cfg.TLSClientConfig.KeyFile != store.CurrentPath() {
		t.Fatalf("node kubeconfig: server %s, credentials %s / %s", cfg.Host, cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile)
	}
	if _, err := tls.LoadX509KeyPair(cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile); err != nil {
		t.Fatalf("the node kubeconfig's pair does not load: %v", err)
	}

	// Not due: nothing asked.
	if out, err := runAgent(t, args...); err != nil {
		t.Fatalf("second run --once: %v\n%s", err, out)
	}
	if n := len(nodeRequests(t, srv.Client)); n != 1 {
		t.Fatalf("%d requests after a second run, want 1", n)
	}

	ecOut, err := exec.Command(framework.Binary(t, "rekey-agent"), "exec-credential", "--cert-dir", certDir).Output()
	if err != nil {
		t.Fatal(err)
	}
	var ec clientauthv1.ExecCredential
	if err := json.Unmarshal(ecOut, &ec); err != nil || ec.Status == nil || !strings.Contains(ec.Status.ClientCertificateData, "BEGIN CERTIFICATE") {
		t.Fatalf("exec-credential: %v %s", err, ecOut)
	}
	if !ec.Status.ExpirationTimestamp.Time.Equal(agent.RotationDeadline(pair.Leaf, nil).Truncate(time.Second)) {
		t.Errorf("expiration %s, want the renewal deadline", ec.Status.ExpirationTimestamp)
	}
	if _, err := exec.Command(framework.Binary(t, "rekey-agent"), "exec-credential", "--cert-dir", t.TempDir()).Output(); err == nil {
		t.Error("exec-credential without a certificate exited 0")
	}
}

// TestAgentRestartedWhileWaitingFindsItsRequest: with a signer a person
// approves, the agent times out waiting, is started again, and waits on the
// same request (no second one); once approved, the next run stores the
// certificate.
func TestAgentRestartedWhileWaitingFindsItsRequest(t *testing.T) {
	srv := framework.StartStandalone(t, t.TempDir())
	ctx := context.Background()
	makeManualNodeSigner(t, srv)
	certDir := t.TempDir()
	args := []string{"run", "--once", "--bootstrap-kubeconfig", bootstrapKubeconfig(t, srv), "--cert-dir", certDir,
		"--node-name", "n2", "--signer-name", "example.com/nodes-by-hand", "--wait-timeout", "2s"}
	for i := 0; i < 2; i++ {
		if out, err := runAgent(t, args...); err == nil || !strings.Contains(out, "not decided within") {
			t.Fatalf("run %d without an approval: %v\n%s", i, err, out)
		}
	}
	requests := nodeRequests(t, srv.Client)
	if len(requests) != 1 {
		t.Fatalf("%d requests after a restart while waiting, want 1", len(requests))
	}
	approved, err := approve(ctx, srv.Client, &requests[0])
	if err != nil || len(approved.Status.Certificate) == 0 {
		t.Fatalf("approval: %v %+v", err, approved)
	}
	if out, err := runAgent(t, args...); err != nil {
		t.Fatalf("run after the approval: %v\n%s", err, out)
	}
	pair, err := (&agent.Store{Dir: certDir, Prefix: agent.PrefixClient}).Current()
	if err != nil || pair.Leaf.Subject.CommonName != "system:node:n2" {
		t.Fatalf("stored: %v", err)
	}
	if n := len(nodeRequests(t, srv.Client)); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(certDir, agent.PrefixClient+".key.tmp")); !os.IsNotExist(err) {
		t.Errorf("pending key left behind: %v", err)
	}
}

// makeManualNodeSigner creates example.com/nodes-by-hand: node client
// certificates a person approves.
func makeManualNodeSigner(t *testing.T, srv *framework.Standalone) {
	t.Helper()
	ctx := context.Background()
	if _, err := srv.Client.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: "nodes-by-hand"}, Spec: rotationv1alpha1.CertificateAuthoritySpec{CommonName: "nodes by hand", KeyAlgorithm: rotationv1alpha1.ECDSAP256},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.CertificatesV1alpha1().Signers().Create(ctx, &certv1alpha1.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: "example.com:nodes-by-hand"},
		Spec: certv1alpha1.SignerSpec{SignerName: "example.com/nodes-by-hand", CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "nodes-by-hand"},
			Policy: certv1alpha1.SignerPolicy{
				AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth},
				MaxDuration:   metav1.Duration{Duration: 24 * time.Hour},
			}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	caOf(t, srv.Client, "nodes-by-hand")
}

// TestAgentKilledAfterCreatingItsRequest: SIGKILL while waiting on the
// request it created; the restarted agent creates no second request and
// stores the certificate once it is approved.
func TestAgentKilledAfterCreatingItsRequest(t *testing.T) {
	srv := framework.StartStandalone(t, t.TempDir())
	makeManualNodeSigner(t, srv)
	certDir := t.TempDir()
	args := []string{"run", "--bootstrap-kubeconfig", bootstrapKubeconfig(t, srv), "--cert-dir", certDir,
		"--node-name", "n3", "--signer-name", "example.com/nodes-by-hand", "--wait-timeout", "10m"}
	cmd := exec.Command(framework.Binary(t, "rekey-agent"), args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var requests []certv1alpha1.CertificateSigningRequest
	deadline := time.Now().Add(30 * time.Second)
	for len(requests) == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		requests = nodeRequests(t, srv.Client)
	}
	if len(requests) != 1 {
		t.Fatalf("%d requests while the agent waits, want 1", len(requests))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	restarted := exec.Command(framework.Binary(t, "rekey-agent"), append(args, "--once")...)
	var out bytes.Buffer
	restarted.Stdout, restarted.Stderr = &out, &out
	if err := restarted.Start(); err != nil {
		t.Fatal(err)
	}
	// Give the restarted agent time to find (or wrongly make) its request.
	time.Sleep(2 * time.Second)
	if n := len(nodeRequests(t, srv.Client)); n != 1 {
		t.Fatalf("%d requests after the restart, want the same one", n)
	}
	if _, err := approve(context.Background(), srv.Client, &requests[0]); err != nil {
		t.Fatal(err)
	}
	if err := restarted.Wait(); err != nil {
		t.Fatalf("restarted agent: %v\n%s", err, out.String())
	}
	pair, err := (&agent.Store{Dir: certDir, Prefix: agent.PrefixClient}).Current()
	if err != nil || pair.Leaf.Subject.CommonName != "system:node:n3" {
		t.Fatalf("stored: %v", err)
	}
}
