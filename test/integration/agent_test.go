package integration

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	"k8s.io/client-go/tools/clientcmd"

	"rekey.io/rekey/pkg/agent"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
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
	out, err := listNodeRequests(context.Background(), client)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// listNodeRequests lists the requests agents made (named node-csr-...).
func listNodeRequests(ctx context.Context, client clientset.Interface) ([]certv1alpha1.CertificateSigningRequest, error) {
	list, err := client.CertificatesV1alpha1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []certv1alpha1.CertificateSigningRequest
	for _, csr := range list.Items {
		if strings.HasPrefix(csr.Name, "node-csr-") {
			out = append(out, csr)
		}
	}
	return out, nil
}

// requestWatches is how many watches of one named request the server has
// open: what an agent holds while it waits on its request (csrwait
// watches by metadata.name, which the server counts with scope
// "resource"; the controllers' informers watch with scope "cluster").
func requestWatches(ctx context.Context, client clientset.Interface) (float64, error) {
	return readMetricValue(ctx, client, `apiserver_longrunning_requests{component="apiserver",group="certificates.rekey.io",resource="certificatesigningrequests",scope="resource",subresource="",verb="WATCH",version="v1alpha1"} `)
}

// TestAgentBootstrapsFromNothing: `rekey-agent run --once` with a bootstrap
// kubeconfig gets a node client certificate (approved and signed in the
// create), writes the pair and the node's kubeconfig; a second run finds
// it current and asks nothing; exec-credential hands it out.
func TestAgentBootstrapsFromNothing(t *testing.T) {
	t.Parallel()
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

	// The node's kubeconfig names the current pair file for certificate
	// and key, and the standalone server accepts it as the node (it trusts
	// its own kubelet client CA, as a cluster's kube-apiserver would).
	cfg, err := clientcmd.BuildConfigFromFlags("", nodeKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != srv.Config.Host || cfg.TLSClientConfig.CertFile != store.CurrentPath() || cfg.TLSClientConfig.KeyFile != store.CurrentPath() {
		t.Fatalf("node kubeconfig: server %s, credentials %s / %s", cfg.Host, cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile)
	}
	node := clientset.NewForConfigOrDie(cfg)
	if _, err := node.CertificatesV1alpha1().Signers().Get(context.Background(), "rekey.io:kube-apiserver-client-kubelet", metav1.GetOptions{}); err != nil {
		t.Fatalf("the node's kubeconfig does not work as the node: %v", err)
	}
	if _, err := node.CertificatesV1alpha1().Signers().List(context.Background(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the node may list Signers (%v): it must be the node, not an admin", err)
	}

	// Not due: nothing asked.
	if out, err := runAgent(t, args...); err != nil {
		t.Fatalf("second run --once: %v\n%s", err, out)
	}
	if n := len(nodeRequests(t, srv.Client)); n != 1 {
		t.Fatalf("%d requests after a second run, want 1", n)
	}

	execCredential := func(args ...string) *clientauthv1.ExecCredential {
		t.Helper()
		before := time.Now()
		ecOut, err := exec.Command(framework.Binary(t, "rekey-agent"), append([]string{"exec-credential", "--cert-dir", certDir}, args...)...).Output()
		if err != nil {
			t.Fatal(err)
		}
		var ec clientauthv1.ExecCredential
		if err := json.Unmarshal(ecOut, &ec); err != nil || ec.Status == nil || !strings.Contains(ec.Status.ClientCertificateData, "BEGIN CERTIFICATE") {
			t.Fatalf("exec-credential: %v %s", err, ecOut)
		}
		if ec.Status.ExpirationTimestamp.Time.Before(before.Truncate(time.Second)) {
			t.Fatalf("expiration %s is in the past", ec.Status.ExpirationTimestamp)
		}
		return &ec
	}
	// By default client-go asks again within a minute (--recheck), so that
	// a renewal run makes during a CA rotation is taken soon.
	if ec := execCredential(); ec.Status.ExpirationTimestamp.Time.After(time.Now().Add(time.Minute)) {
		t.Errorf("expiration %s, want within --recheck's minute", ec.Status.ExpirationTimestamp)
	}
	if ec := execCredential("--recheck", "0"); !ec.Status.ExpirationTimestamp.Time.Equal(agent.RotationDeadline(pair.Leaf, nil).Truncate(time.Second)) {
		t.Errorf("expiration %s with --recheck 0, want the renewal deadline", ec.Status.ExpirationTimestamp)
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
	t.Parallel()
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
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	makeManualNodeSigner(t, srv)
	certDir := t.TempDir()
	args := []string{"run", "--bootstrap-kubeconfig", bootstrapKubeconfig(t, srv), "--cert-dir", certDir,
		"--node-name", "n3", "--signer-name", "example.com/nodes-by-hand", "--wait-timeout", "10m"}
	cmd := framework.StartAgent(t, args...)
	var requests []certv1alpha1.CertificateSigningRequest
	framework.Eventually(t, 30*time.Second, "the agent's request", func(ctx context.Context) error {
		var err error
		if requests, err = listNodeRequests(ctx, srv.Client); err != nil {
			return err
		}
		if len(requests) == 0 {
			return errors.New("no request yet")
		}
		return nil
	})
	if len(requests) != 1 {
		t.Fatalf("%d requests while the agent waits, want 1", len(requests))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The killed agent's watch on its request ends with its connection;
	// the restarted agent's is then the witness that it is waiting.
	framework.Eventually(t, 30*time.Second, "the killed agent's watch ends", func(ctx context.Context) error {
		if n, err := requestWatches(ctx, srv.Client); err != nil || n != 0 {
			return fmt.Errorf("%v watches of a request open (%v)", n, err)
		}
		return nil
	})

	restarted := exec.Command(framework.Binary(t, "rekey-agent"), append(args, "--once")...)
	var out bytes.Buffer
	restarted.Stdout, restarted.Stderr = &out, &out
	if err := restarted.Start(); err != nil {
		t.Fatal(err)
	}
	// Once it watches a request, it has found (or wrongly made) the one it
	// waits on.
	framework.Eventually(t, 30*time.Second, "the restarted agent waits on a request", func(ctx context.Context) error {
		if n, err := requestWatches(ctx, srv.Client); err != nil || n == 0 {
			return fmt.Errorf("%v watches of a request open (%v)", n, err)
		}
		return nil
	})
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

// rotateKubeletClientCA runs a rotation action on the node client CA and
// waits for the phase.
func rotateKubeletClientCA(t *testing.T, client clientset.Interface, action rotationv1alpha1.RotationAction, phase rotationv1alpha1.RotationPhase) *rotationv1alpha1.CertificateAuthority {
	t.Helper()
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Rotate(context.Background(), standalone.NodeClientCA,
		&rotationv1alpha1.Rotation{Action: action, Force: action == rotationv1alpha1.RotationComplete}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("rotation %s: %v", action, err)
	}
	return waitForPhase(t, client, standalone.NodeClientCA, phase)
}

// agentMetric reads one of the agent's metrics.
func agentMetric(addr, line string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, line+" ") {
			v, _ := strconv.ParseFloat(strings.TrimPrefix(l, line+" "), 64)
			return v
		}
	}
	return 0
}

// TestAgentRenewsAcrossRotationsAndAServerOutage: the standalone server
// accepts the node's own certificate, so the running agent renews with it.
// It renews at once on a CA rotation; in a second rotation the server is
// down when the agent looks: it keeps its valid certificate, counts the
// failures, backs off, and renews once the server is back.
//
// Not parallel: the server comes back on the port the agent's kubeconfig
// names, which a test running beside it could take while it is down.
func TestAgentRenewsAcrossRotationsAndAServerOutage(t *testing.T) {
	dataDir := t.TempDir()
	srv := framework.StartStandalone(t, dataDir)
	certDir := t.TempDir()
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(t))
	cmd := framework.StartAgent(t, "run", "--bootstrap-kubeconfig", bootstrapKubeconfig(t, srv),
		"--cert-dir", certDir, "--node-name", "n4", "--issuer-check-interval", "1s", "--metrics-bind-address", metricsAddr)
	store := &agent.Store{Dir: certDir, Prefix: agent.PrefixClient}
	waitForLeaf := func(what string, ok func(*x509.Certificate) bool) *x509.Certificate {
		t.Helper()
		var leaf *x509.Certificate
		framework.Eventually(t, 60*time.Second, "a certificate "+what, func(context.Context) error {
			pair, err := store.Current()
			if err != nil {
				return err
			}
			if !ok(pair.Leaf) {
				return fmt.Errorf("the current one (serial %s from %s) is not", pair.Leaf.SerialNumber, pair.Leaf.Issuer)
			}
			leaf = pair.Leaf
			return nil
		})
		return leaf
	}
	first := waitForLeaf("from the bootstrap", func(*x509.Certificate) bool { return true })
	// The new CA signs once published and the agent renews at once (no
	// trustPropagation, no renewalWindow): this test is about renewing,
	// not about when.
	if err := framework.SetImmediateRotation(context.Background(), srv.Client, standalone.NodeClientCA); err != nil {
		t.Fatal(err)
	}

	// Rotation 1: renewed at once, with the node's own certificate.
	ca := rotateKubeletClientCA(t, srv.Client, rotationv1alpha1.RotationStart, rotationv1alpha1.PhasePrepared)
	current, err := authority.ParseCertificatePEM(ca.Status.Current.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	second := waitForLeaf("renewed in the first rotation", func(c *x509.Certificate) bool { return c.CheckSignatureFrom(current) == nil })
	if second.Equal(first) {
		t.Fatal("not renewed")
	}
	requests := nodeRequests(t, srv.Client)
	renewedBy := ""
	for _, r := range requests {
		if r.Spec.Username != "system:bootstrap:abc123" {
			renewedBy = r.Spec.Username
		}
	}
	if renewedBy != "system:node:n4" {
		t.Fatalf("the renewal was asked by %q, want the node itself (requests %d)", renewedBy, len(requests))
	}
	rotateKubeletClientCA(t, srv.Client, rotationv1alpha1.RotationComplete, rotationv1alpha1.PhaseCompleted)

	// Rotation 2 while the server is down when the agent looks.
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ca = rotateKubeletClientCA(t, srv.Client, rotationv1alpha1.RotationStart, rotationv1alpha1.PhasePrepared)
	// Down hard: a graceful stop would wait for the stopped agent's watch.
	srv.Kill()
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	const checkErrors = `rekey_agent_renewal_errors_total{prefix="rekey-client",reason="issuer_check"}`
	framework.Eventually(t, 30*time.Second, "failures counted while the server is down", func(context.Context) error {
		if v := agentMetric(metricsAddr, checkErrors); v < 2 {
			return fmt.Errorf("%s is %v, want at least 2", checkErrors, v)
		}
		return nil
	})
	if pair, err := store.Current(); err != nil || !pair.Leaf.Equal(second) {
		t.Fatalf("the valid certificate was not kept while the server was down: %v", err)
	}
	restarted, err := framework.LaunchStandalone(t.TempDir(), framework.Binary(t, "rekey-apiserver"), dataDir, srv.Port, nil)
	if restarted != nil {
		t.Cleanup(func() { restarted.Stop(t) })
	}
	if err != nil {
		t.Fatal(err)
	}
	newCurrent, err := authority.ParseCertificatePEM(ca.Status.Current.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	third := waitForLeaf("renewed once the server is back", func(c *x509.Certificate) bool { return c.CheckSignatureFrom(newCurrent) == nil })
	if third.Equal(second) {
		t.Fatal("not renewed after the outage")
	}
}

// TestAgentRenewsAtItsDeadlineAgainAndAgain: ten-minute certificates,
// renewed two seconds after issue (--renew-before 598s): the running agent
// rotates several times in a few seconds, each time with the node's
// current certificate.
func TestAgentRenewsAtItsDeadlineAgainAndAgain(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	certDir := t.TempDir()
	framework.StartAgent(t, "run", "--bootstrap-kubeconfig", bootstrapKubeconfig(t, srv),
		"--cert-dir", certDir, "--node-name", "n5", "--expiration-seconds", "600", "--renew-before", "598s", "--issuer-check-interval", "0")
	store := &agent.Store{Dir: certDir, Prefix: agent.PrefixClient}
	var seen []*x509.Certificate
	framework.Eventually(t, 60*time.Second, "the bootstrap certificate and three renewals", func(context.Context) error {
		if pair, err := store.Current(); err == nil && (len(seen) == 0 || !pair.Leaf.Equal(seen[len(seen)-1])) {
			seen = append(seen, pair.Leaf)
		}
		if len(seen) < 4 {
			return fmt.Errorf("%d certificates so far", len(seen))
		}
		return nil
	})
	for _, c := range seen {
		if life := time.Until(c.NotAfter); life > 10*time.Minute || life < 9*time.Minute {
			t.Errorf("certificate valid for %s more, want about ten minutes", life)
		}
	}
	renewals := 0
	for _, r := range nodeRequests(t, srv.Client) {
		if r.Spec.Username == "system:node:n5" {
			renewals++
		}
	}
	if renewals < 3 {
		t.Fatalf("%d renewals asked with the node's own certificate, want at least 3", renewals)
	}
}

// TestAgentKilledDuringTheSwapKeepsAWorkingPair: SIGKILL between writing
// the renewed pair and making it current; the restarted agent finds the
// previous pair whole and current.
func TestAgentKilledDuringTheSwapKeepsAWorkingPair(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	certDir := t.TempDir()
	args := []string{"run", "--once", "--bootstrap-kubeconfig", bootstrapKubeconfig(t, srv), "--cert-dir", certDir, "--node-name", "n6", "--issuer-check-interval", "0"}
	if out, err := runAgent(t, args...); err != nil {
		t.Fatalf("bootstrap: %v\n%s", err, out)
	}
	store := &agent.Store{Dir: certDir, Prefix: agent.PrefixClient}
	before, err := store.Current()
	if err != nil {
		t.Fatal(err)
	}
	// Due at once (renew-before longer than the lifetime), killed at the swap.
	renew := exec.Command(framework.Binary(t, "rekey-agent"), append(args, "--renew-before", "100000h")...)
	renew.Env = append(os.Environ(), "REKEY_AGENT_TEST_KILL_AT="+agent.StepSwap)
	out, err := renew.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the renewal was not killed at the swap: %v\n%s", err, out)
	}
	after, err := store.Current()
	if err != nil || !after.Leaf.Equal(before.Leaf) {
		t.Fatalf("after a kill during the swap the current pair is %v (err %v), want the previous one whole", after, err)
	}
	// Restarted: the pair in place is used (not due without --renew-before).
	if out, err := runAgent(t, args...); err != nil {
		t.Fatalf("restart: %v\n%s", err, out)
	}
	// And a renewal now succeeds over the leftovers.
	if out, err := runAgent(t, append(args, "--renew-before", "100000h")...); err != nil {
		t.Fatalf("renewal after the crash: %v\n%s", err, out)
	}
	renewed, err := store.Current()
	if err != nil || renewed.Leaf.Equal(before.Leaf) {
		t.Fatalf("not renewed after the crash: %v", err)
	}
}
