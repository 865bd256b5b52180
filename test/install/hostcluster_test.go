package install

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

const (
	// The kubelet's signer names, which kube-controller-manager does not
	// sign here (--controllers=*,-csrsigning).
	kubeletClientSigner  = "kubernetes.io/kube-apiserver-client-kubelet"
	kubeletServingSigner = "kubernetes.io/kubelet-serving"
	hcClientCA           = "install-kubelet-client"
	hcServingCA          = "install-kubelet-serving"
	// hcConsumer is the TrustConsumer of the trust-sync that keeps
	// kube-apiserver's --client-ca-file.
	hcConsumer = "kube-apiserver-install"
	// hcBootstrapGroup is the bootstrap token's extra group, which the
	// test's bindings name (as kubeadm's name
	// system:bootstrappers:kubeadm:default-node-token).
	hcBootstrapGroup = "system:bootstrappers:install-test"
	// hcClientLifetime is the client signer's maxDuration, the floor: the
	// kubelet renews at 70-90% of its certificate's lifetime (backdate
	// included), so the CA rotation (REKEY_LONG=1) sees a renewal within
	// 9 minutes of the bootstrap.
	hcClientLifetime = 10 * time.Minute
	// hcExtraName is a SAN no Node has.
	hcExtraName = "extra.install.example.com"
)

// TestHostClusterKubelet is issue #30's proof for a stock kubelet, with no
// rekey-agent: rekey installed in-cluster serves the host cluster's
// certificates.k8s.io CSRs of the kubelet's two signer names
// (kube-controller-manager signs neither). The node's kubelet is
// restarted as a freshly provisioned one: a bootstrap token, an empty
// certificate directory, rotateCertificates and serverTLSBootstrap. Its
// client certificate comes from rekey's CA and its Node turns Ready with
// it (kube-apiserver trusting that CA through rekey-agent trust-sync);
// its serving certificate request is approved by rekey's NodeServing
// rules (AutoApproved) and signed; kube-apiserver, verifying kubelets
// against rekey's serving bundle (--kubelet-certificate-authority),
// reaches it for `kubectl logs` and `kubectl exec`; a serving request with
// a SAN that is not the Node's stays pending with a NotAutoApproved event
// naming the rule. With REKEY_LONG=1 it also rotates the client CA across
// the kubelet's certificate: the PENDING count holds it until the kubelet
// renews (at 70-90% of its 15-minute lifetime) and then falls to zero.
//
// The node goes back to its first kubelet and kube-apiserver to its first
// flags when the test ends, for the tests that follow.
func TestHostClusterKubelet(t *testing.T) {
	deploy := filepath.Join(framework.RepoRoot(), "artifacts", "deploy")
	pv := dataVolume(t, "rekey-data-hostcluster")
	t.Cleanup(func() {
		_, _ = cluster.Kubectl(nil, "delete", "pv", pv, "--ignore-not-found", fmt.Sprintf("--wait=%t", !t.Failed()))
	})
	start := time.Now()
	install(t, deploy)
	// Serving the host cluster's certificate APIs is opt-in.
	hostCluster := filepath.Join(framework.RepoRoot(), "artifacts", "rbac", "host-cluster.yaml")
	kubectl(t, "apply", "-f", hostCluster)
	rekeyPod := waitServing(t, 1)[0]
	t.Logf("rekey installed and serving after %s", time.Since(start).Round(time.Second))

	clientBundle, servingBundle := createKubeletSigners(t)
	syncer := trustClientCA(t)
	token := bootstrapToken(t)
	kubeletServingCA := filepath.Join(cluster.Dir, "pki", "kubelet-serving-ca.crt")
	writeFile(t, kubeletServingCA, servingBundle)
	restartKubeAPIServer(t, kubeletServingCA)
	// The restart cut rekey's APIServices off for a moment.
	waitServing(t, 1)

	node := bootstrapKubelet(t, token)
	// The new kubelet probes rekey's pod afresh.
	waitServing(t, 1)

	// The client certificate: rekey's CA, the node's identity, and the
	// native request that got it signed.
	clientCert := node.clientCertificate(t)
	verifyIn(t, clientCert, clientBundle, x509.ExtKeyUsageClientAuth)
	if clientCert.Subject.CommonName != "system:node:"+framework.KubeNodeName || !slices.Equal(clientCert.Subject.Organization, []string{"system:nodes"}) {
		t.Fatalf("the kubelet's client certificate is for %s", clientCert.Subject)
	}
	bootstrapCSR := nativeCSRWith(t, kubeletClientSigner, clientCert)
	if bootstrapCSR.Spec.Username != "system:bootstrap:"+token.id {
		t.Fatalf("CSR %s was requested by %s, not the bootstrap token", bootstrapCSR.Name, bootstrapCSR.Spec.Username)
	}
	approval := approvedCondition(bootstrapCSR)
	// kube-controller-manager runs without csrapproving here: rekey's
	// NodeClient approval, by its SubjectAccessReview, approved it.
	if approval == nil || approval.Reason != "AutoApproved" || !strings.Contains(approval.Message, "create certificates.k8s.io certificatesigningrequests/nodeclient") {
		t.Fatalf("client CSR %s approved by %v with %+v, want rekey's NodeClient approval (nodeclient SubjectAccessReview)", bootstrapCSR.Name, approvalManagers(bootstrapCSR), approval)
	}
	t.Logf("client CSR %s (by %s): approved by %v (%s: %s); certificate serial %x from rekey's CA, valid %s to %s",
		bootstrapCSR.Name, bootstrapCSR.Spec.Username, approvalManagers(bootstrapCSR), approval.Reason, approval.Message,
		clientCert.SerialNumber, clientCert.NotBefore.UTC().Format(time.RFC3339), clientCert.NotAfter.UTC().Format(time.RFC3339))

	// The serving certificate: approved by rekey's NodeServing rules, for
	// the Node's addresses, signed by rekey's serving CA, and served.
	servingCert := node.servingCertificate(t)
	verifyIn(t, servingCert, servingBundle, x509.ExtKeyUsageServerAuth)
	servingCSR := nativeCSRWith(t, kubeletServingSigner, servingCert)
	approval = approvedCondition(servingCSR)
	if approval.Reason != "AutoApproved" || servingCSR.Spec.Username != "system:node:"+framework.KubeNodeName {
		t.Fatalf("serving CSR %s of %s approved with reason %q (%s) by %v, want rekey's AutoApproved", servingCSR.Name, servingCSR.Spec.Username,
			approval.Reason, approval.Message, approvalManagers(servingCSR))
	}
	if !slices.Contains(servingCert.DNSNames, framework.KubeNodeName) || !slices.ContainsFunc(servingCert.IPAddresses, func(ip net.IP) bool { return ip.String() == node.ip }) {
		t.Fatalf("the serving certificate names %v %v, want %s and %s", servingCert.DNSNames, servingCert.IPAddresses, framework.KubeNodeName, node.ip)
	}
	t.Logf("serving CSR %s: approved by %v (%s: %s); certificate for %v %v", servingCSR.Name, approvalManagers(servingCSR), approval.Reason, approval.Message,
		servingCert.DNSNames, servingCert.IPAddresses)
	if served := node.servedCertificate(t, servingBundle); !served.Equal(servingCert) {
		t.Fatalf("the kubelet serves serial %x, not its rekey-signed certificate %x", served.SerialNumber, servingCert.SerialNumber)
	}

	// kube-apiserver reaches the kubelet, verifying it against rekey's
	// bundle: the logs and an exec of rekey's own pod, on this node.
	framework.Eventually(t, time.Minute, "kubectl logs of "+rekeyPod+" through the kubelet", func(context.Context) error {
		out, err := cluster.Kubectl(nil, "logs", "-n", namespace, rekeyPod, "--tail=3")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) == "" {
			return fmt.Errorf("no log lines")
		}
		return nil
	})
	framework.Eventually(t, time.Minute, "kubectl exec in "+rekeyPod+" through the kubelet", func(context.Context) error {
		out, err := cluster.Kubectl(nil, "exec", "-n", namespace, rekeyPod, "--", "/rekey-apiserver", "--help")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "rekey-apiserver") {
			return fmt.Errorf("unexpected output: %.300s", out)
		}
		return nil
	})

	refusesForeignSAN(t, node)

	if longTests() {
		t.Run("CARotation", func(t *testing.T) { rotatesAcrossTheKubelet(t, node, clientCert) })
	} else {
		t.Log("the client CA's rotation across the kubelet's certificate runs with REKEY_LONG=1 (make test-long)")
	}

	// trust-sync goes before rekey (else it reports failures until the
	// test ends); kube-apiserver keeps the file it wrote until the
	// cleanup restores the first one, after the node's first kubelet is
	// back.
	_ = syncer.Process.Kill()
	kubectl(t, "delete", "-f", hostCluster)
	uninstall(t, deploy)
}

// createKubeletSigners creates the two CAs and the Signers of the
// kubelet's signer names that serve the host cluster's CSRs, waits for
// both CAs to sign, and returns their trust bundles (client, serving).
func createKubeletSigners(t *testing.T) (string, string) {
	t.Helper()
	ctx := context.Background()
	admin := cluster.RekeyAdmin
	for name, cn := range map[string]string{hcClientCA: "install kubelet client CA", hcServingCA: "install kubelet serving CA"} {
		if _, err := admin.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: rotationv1alpha1.CertificateAuthoritySpec{CommonName: cn, KeyAlgorithm: rotationv1alpha1.ECDSAP256,
				Validity: metav1.Duration{Duration: 24 * time.Hour}, KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd},
				// The trust gate is kube-apiserver's trust-sync report;
				// nothing else verifies with these CAs.
				Rotation: framework.ImmediateRotation()},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nodeSubject := certv1alpha1.SubjectPolicy{CommonNamePrefix: "system:node:", Organizations: []string{"system:nodes"}, ForbidOtherAttributes: true}
	signers := []certv1alpha1.SignerSpec{{
		SignerName: kubeletClientSigner, CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: hcClientCA},
		Policy: certv1alpha1.SignerPolicy{
			// The kubelet asks for key encipherment only with an RSA key.
			AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth},
			MaxDuration:   metav1.Duration{Duration: hcClientLifetime},
			Subject:       nodeSubject,
		},
		Approval:    certv1alpha1.SignerApproval{Mode: certv1alpha1.ApprovalNodeClient},
		HostCluster: &certv1alpha1.HostClusterServing{CertificateSigningRequests: true},
	}, {
		SignerName: kubeletServingSigner, CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: hcServingCA},
		Policy: certv1alpha1.SignerPolicy{
			AllowedUsages:   []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageServerAuth},
			MaxDuration:     metav1.Duration{Duration: 24 * time.Hour},
			Subject:         nodeSubject,
			SubjectAltNames: certv1alpha1.SubjectAltNamePolicy{Allowed: []certv1alpha1.SubjectAltNameType{certv1alpha1.SANTypeDNS, certv1alpha1.SANTypeIP}, RequireDNSOrIP: true},
		},
		Approval:    certv1alpha1.SignerApproval{Mode: certv1alpha1.ApprovalNodeServing},
		HostCluster: &certv1alpha1.HostClusterServing{CertificateSigningRequests: true},
	}}
	for _, spec := range signers {
		if _, err := admin.CertificatesV1alpha1().Signers().Create(ctx, &certv1alpha1.Signer{
			ObjectMeta: metav1.ObjectMeta{Name: strings.Replace(spec.SignerName, "/", ":", 1)}, Spec: spec,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bundles := map[string]string{}
	for _, name := range []string{hcClientCA, hcServingCA} {
		framework.Eventually(t, time.Minute, "CA "+name+" signing", func(ctx context.Context) error {
			ca, err := admin.RotationV1alpha1().CertificateAuthorities().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if ca.Status.Current == nil || ca.Status.TrustBundle == "" {
				return fmt.Errorf("conditions %+v", ca.Status.Conditions)
			}
			bundles[name] = ca.Status.TrustBundle
			return nil
		})
	}
	return bundles[hcClientCA], bundles[hcServingCA]
}

// trustClientCA runs rekey-agent trust-sync for kube-apiserver's
// --client-ca-file: the cluster's own client CA (fixed) and the trust
// bundle of the kubelet client CA, reported as TrustConsumer hcConsumer,
// which a rotation of that CA waits for. It returns once the file holds
// the CA; the cleanup puts the cluster's file back.
func trustClientCA(t *testing.T) *exec.Cmd {
	t.Helper()
	fixed := filepath.Join(cluster.Dir, "pki", "cluster-client-ca.crt")
	writeFile(t, fixed, string(cluster.ClientCA.CertPEM()))
	t.Cleanup(func() {
		if err := cluster.TrustClientCAs(nil); err != nil {
			t.Errorf("restoring kube-apiserver's client CA file: %v", err)
		}
	})
	syncer := framework.StartAgent(t, "trust-sync", "--kubeconfig", cluster.AdminKubeconfig, "--consumer", hcConsumer,
		"--file", cluster.ClientCAFile(), "--include", fixed, "--ca", hcClientCA)
	framework.Eventually(t, time.Minute, "trust-sync's report of "+hcClientCA, func(ctx context.Context) error {
		return reportsCurrent(ctx, hcClientCA)
	})
	return syncer
}

// reportsCurrent says whether hcConsumer reports holding every CA of
// the CA's trust bundle.
func reportsCurrent(ctx context.Context, caName string) error {
	ca, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(ctx, caName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	tc, err := cluster.RekeyAdmin.RotationV1alpha1().TrustConsumers().Get(ctx, hcConsumer, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, h := range tc.Status.Holds {
		if h.CertificateAuthority != caName {
			continue
		}
		for _, c := range []*rotationv1alpha1.CACertificate{ca.Status.Current, ca.Status.Next} {
			if c != nil && !slices.Contains(h.Fingerprints, c.Fingerprint) {
				return fmt.Errorf("consumer %s reports %v, not %s", hcConsumer, h.Fingerprints, c.Fingerprint)
			}
		}
		return nil
	}
	return fmt.Errorf("consumer %s reports nothing of %s: %+v", hcConsumer, caName, tc.Status.Holds)
}

// bootstrapTokenInfo is a bootstrap token: system:bootstrap:<id>.
type bootstrapTokenInfo struct{ id, secret string }

// bootstrapToken creates a bootstrap token (its Secret in kube-system) of
// group hcBootstrapGroup and binds that group, as kubeadm does, to create
// CSRs and to have node client certificates approved (nodeclient), and
// system:nodes to have their renewals approved (selfnodeclient).
func bootstrapToken(t *testing.T) bootstrapTokenInfo {
	t.Helper()
	ctx := context.Background()
	token := bootstrapTokenInfo{id: randomString(t, 6), secret: randomString(t, 16)}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + token.id, Namespace: metav1.NamespaceSystem},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id": token.id, "token-secret": token.secret,
			"expiration":                     time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"auth-extra-groups":              hcBootstrapGroup,
		},
	}
	if _, err := cluster.Admin.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Admin.CoreV1().Secrets(metav1.NamespaceSystem).Delete(context.Background(), secret.Name, metav1.DeleteOptions{})
	})
	for name, b := range map[string]struct{ group, role string }{
		"install-kubelet-bootstrap":      {hcBootstrapGroup, "system:node-bootstrapper"},
		"install-kubelet-nodeclient":     {hcBootstrapGroup, "system:certificates.k8s.io:certificatesigningrequests:nodeclient"},
		"install-kubelet-selfnodeclient": {"system:nodes", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"},
	} {
		if _, err := cluster.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: b.group}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cluster.Admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	return token
}

// randomString is n characters of [a-z0-9], a bootstrap token's alphabet.
func randomString(t *testing.T, n int) string {
	t.Helper()
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		v, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			t.Fatal(err)
		}
		b[i] = alphabet[v.Int64()]
	}
	return string(b)
}

// restartKubeAPIServer restarts kube-apiserver with bootstrap token
// authentication, a client certificate for the kubelets' APIs, and
// kubeletCA to verify the kubelets' serving certificates with: it reads
// that file when it starts (and then only every 5 minutes). The cleanup
// restarts it with its first flags.
func restartKubeAPIServer(t *testing.T, kubeletCA string) {
	t.Helper()
	certFile, keyFile, err := cluster.ClientCertificate("kube-apiserver-kubelet-client", "kube-apiserver-kubelet-client")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cluster.RestartKubeAPIServer("--enable-bootstrap-token-auth=true",
		"--kubelet-certificate-authority="+kubeletCA,
		"--kubelet-client-certificate="+certFile, "--kubelet-client-key="+keyFile); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver restarted with bootstrap tokens and --kubelet-certificate-authority in %s", time.Since(start).Round(100*time.Millisecond))
	t.Cleanup(func() {
		if err := cluster.RestartKubeAPIServer(); err != nil {
			t.Errorf("restarting kube-apiserver with its first flags: %v", err)
		}
	})
}

// hcNode is the node's kubelet as bootstrapKubelet restarted it.
type hcNode struct {
	certDir string
	ip      string
	port    int
}

// bootstrapKubelet restarts the node's kubelet as a stock kubelet that
// has nothing yet: a bootstrap kubeconfig with the token, a kubeconfig
// and a certificate directory that do not exist, rotateCertificates and
// serverTLSBootstrap, its API on every address for kube-apiserver (which
// it authenticates by the cluster's client CA). It waits for the Node to
// be Ready by this kubelet. The cleanup puts the first kubelet back.
func bootstrapKubelet(t *testing.T, token bootstrapTokenInfo) *hcNode {
	t.Helper()
	dir := filepath.Join(cluster.Node.Dir, "kubelet-bootstrap")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "pki"), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubernetes"] = &clientcmdapi.Cluster{Server: cluster.KubeAPIURL, CertificateAuthorityData: cluster.ServingCA.CertPEM()}
	cfg.AuthInfos["bootstrap"] = &clientcmdapi.AuthInfo{Token: token.id + "." + token.secret}
	cfg.Contexts["bootstrap"] = &clientcmdapi.Context{Cluster: "kubernetes", AuthInfo: "bootstrap"}
	cfg.CurrentContext = "bootstrap"
	bootstrap := filepath.Join(dir, "bootstrap-kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, bootstrap); err != nil {
		t.Fatal(err)
	}
	clientCA := filepath.Join(cluster.Dir, "pki", "cluster-client-ca.crt")
	writeFile(t, clientCA, string(cluster.ClientCA.CertPEM()))

	first := cluster.Node.StartedWith
	t.Cleanup(func() {
		restart := time.Now()
		first.LogName = "kubelet-restored"
		if err := cluster.Node.RestartKubelet(first); err != nil {
			t.Errorf("restarting the node's first kubelet: %v", err)
			return
		}
		if err := cluster.WaitNodeReady(2*time.Minute, restart); err != nil {
			t.Errorf("the node's first kubelet: %v", err)
		}
	})
	restart := time.Now()
	if err := cluster.Node.RestartKubelet(framework.KubeletOptions{
		Binary: first.Binary, LogName: "kubelet-bootstrap",
		BootstrapKubeconfig: bootstrap, Kubeconfig: filepath.Join(dir, "kubeconfig"), CertDir: filepath.Join(dir, "pki"),
		RotateCertificates: true, ServerTLSBootstrap: true,
		Address: "0.0.0.0", ClientCAFile: clientCA,
	}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitNodeReady(3*time.Minute, restart); err != nil {
		csrs, _ := cluster.Kubectl(nil, "get", "csr", "-o", "wide")
		t.Fatalf("%v\nCSRs:\n%s\nkubelet:\n%s\nrekey:\n%s", err, csrs, cluster.Node.Kubelet.LogTail(4000), cluster.PodLogs("rekey-apiserver"))
	}
	n := &hcNode{certDir: filepath.Join(dir, "pki")}
	t.Logf("the bootstrapped kubelet's Node Ready %s after its start", time.Since(restart).Round(100*time.Millisecond))
	nodeObj, err := cluster.Admin.CoreV1().Nodes().Get(context.Background(), framework.KubeNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range nodeObj.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			n.ip = a.Address
		}
	}
	n.port = int(nodeObj.Status.DaemonEndpoints.KubeletEndpoint.Port)
	if n.ip == "" || n.port == 0 {
		t.Fatalf("Node %s has no InternalIP or kubelet port: %+v", framework.KubeNodeName, nodeObj.Status)
	}
	return n
}

// clientCertificate is the kubelet's current client certificate.
func (n *hcNode) clientCertificate(t *testing.T) *x509.Certificate {
	t.Helper()
	return n.currentCertificate(t, "kubelet-client-current.pem", time.Minute)
}

// servingCertificate waits for the kubelet's serving certificate.
func (n *hcNode) servingCertificate(t *testing.T) *x509.Certificate {
	t.Helper()
	return n.currentCertificate(t, "kubelet-server-current.pem", 2*time.Minute)
}

// currentCertificate waits for the kubelet's file (certificate then key)
// and returns its certificate.
func (n *hcNode) currentCertificate(t *testing.T, file string, timeout time.Duration) *x509.Certificate {
	t.Helper()
	var cert *x509.Certificate
	err := framework.EventuallyErr(timeout, func(context.Context) error {
		var err error
		cert, err = readCertificate(filepath.Join(n.certDir, file))
		return err
	})
	if err != nil {
		csrs, _ := cluster.Kubectl(nil, "get", "csr", "-o", "wide")
		t.Fatalf("the kubelet's %s: %v\nCSRs:\n%s\nkubelet:\n%s\nrekey:\n%s", file, err, csrs, cluster.Node.Kubelet.LogTail(4000), cluster.PodLogs("rekey-apiserver"))
	}
	return cert
}

func readCertificate(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return nil, fmt.Errorf("no certificate in %s", path)
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}

// servedCertificate is the certificate the kubelet's API presents at the
// Node's InternalIP, verified against bundle for that address.
func (n *hcNode) servedCertificate(t *testing.T, bundle string) *x509.Certificate {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(bundle)) {
		t.Fatal("no certificate in the serving bundle")
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", net.JoinHostPort(n.ip, strconv.Itoa(n.port)),
		&tls.Config{RootCAs: roots, ServerName: n.ip, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("a TLS handshake with the kubelet at %s:%d, verifying with rekey's serving bundle: %v", n.ip, n.port, err)
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0]
}

// verifyIn checks that cert chains to a CA of bundle for usage.
func verifyIn(t *testing.T, cert *x509.Certificate, bundle string, usage x509.ExtKeyUsage) {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(bundle)) {
		t.Fatal("no certificate in the bundle")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		t.Fatalf("certificate %s (serial %x) does not verify against rekey's CA: %v", cert.Subject, cert.SerialNumber, err)
	}
}

// nativeCSRWith returns the host cluster's CSR of signerName whose
// status.certificate is cert.
func nativeCSRWith(t *testing.T, signerName string, cert *x509.Certificate) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	var found *certificatesv1.CertificateSigningRequest
	framework.Eventually(t, 30*time.Second, "the CSR that issued serial "+cert.SerialNumber.Text(16), func(ctx context.Context) error {
		csrs, err := cluster.Admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{FieldSelector: "spec.signerName=" + signerName})
		if err != nil {
			return err
		}
		for i := range csrs.Items {
			if c, err := readCertificatePEM(csrs.Items[i].Status.Certificate); err == nil && c.Equal(cert) {
				found = &csrs.Items[i]
				return nil
			}
		}
		return fmt.Errorf("none of the %d CSRs of %s holds it", len(csrs.Items), signerName)
	})
	if approvedCondition(found) == nil {
		t.Fatalf("CSR %s has a certificate and no Approved condition: %+v", found.Name, found.Status.Conditions)
	}
	return found
}

func readCertificatePEM(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("no PEM")
	}
	return x509.ParseCertificate(block.Bytes)
}

func approvedCondition(csr *certificatesv1.CertificateSigningRequest) *certificatesv1.CertificateSigningRequestCondition {
	for i := range csr.Status.Conditions {
		if c := &csr.Status.Conditions[i]; c.Type == certificatesv1.CertificateApproved && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// approvalManagers are the field managers that wrote the CSR's approval
// (rekey's approver, or kube-controller-manager's for node client
// certificates: its csrapproving still runs).
func approvalManagers(csr *certificatesv1.CertificateSigningRequest) []string {
	var out []string
	for _, m := range csr.ManagedFields {
		if m.Subresource == "approval" {
			out = append(out, m.Manager)
		}
	}
	return out
}

// refusesForeignSAN: a serving request of the node (its own identity)
// that adds a DNS name no Node has stays pending, with a NotAutoApproved
// event naming the rule, and rekey neither approves, denies nor signs it.
func refusesForeignSAN(t *testing.T, n *hcNode) {
	t.Helper()
	ctx := context.Background()
	kubeconfig, err := cluster.UserKubeconfig("system:node:"+framework.KubeNodeName, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	asNode, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := asNode.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "install-extra-san-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:node:" + framework.KubeNodeName, Organizations: []string{"system:nodes"},
				DNSNames: []string{framework.KubeNodeName, hcExtraName}, IPAddresses: []net.IP{net.ParseIP(n.ip)}}),
			SignerName: kubeletServingSigner,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Admin.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), csr.Name, metav1.DeleteOptions{})
	})
	var event corev1.Event
	framework.Eventually(t, time.Minute, "a NotAutoApproved event on CSR "+csr.Name, func(ctx context.Context) error {
		events, err := cluster.Admin.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + csr.Name + ",reason=NotAutoApproved"})
		if err != nil {
			return err
		}
		if len(events.Items) == 0 {
			return fmt.Errorf("no event")
		}
		event = events.Items[0]
		return nil
	})
	if event.Type != corev1.EventTypeWarning || !strings.Contains(event.Message, hcExtraName) {
		t.Fatalf("the NotAutoApproved event is %s %q; want a Warning naming %s", event.Type, event.Message, hcExtraName)
	}
	t.Logf("CSR %s with SAN %s: %s event %q", csr.Name, hcExtraName, event.Reason, event.Message)
	// The event is the witness that rekey has decided; the request must
	// stay as it is.
	framework.Stays(t, 5*time.Second, "CSR "+csr.Name+" pending", func(ctx context.Context) error {
		got, err := cluster.Admin.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(got.Status.Conditions) > 0 || len(got.Status.Certificate) > 0 {
			return fmt.Errorf("conditions %+v, %d bytes of certificate", got.Status.Conditions, len(got.Status.Certificate))
		}
		return nil
	})
}

// rotatesAcrossTheKubelet rotates the kubelet client CA while the kubelet
// holds a certificate of it: once Prepared (after trust-sync reported
// kube-apiserver's file holding the new CA), the PENDING count
// includes the kubelet's certificate; the kubelet renews by itself at
// 70-90% of the certificate's lifetime, through a native CSR that rekey's
// new CA signs; the count falls to zero, the Node stays Ready, and
// Complete needs no force.
func rotatesAcrossTheKubelet(t *testing.T, n *hcNode, old *x509.Certificate) {
	ctx := context.Background()
	admin := cluster.RekeyAdmin
	start := time.Now()
	before, err := admin.RotationV1alpha1().CertificateAuthorities().Get(ctx, hcClientCA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldCA := firstCertificate(t, before.Status.TrustBundle)
	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, hcClientCA, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca := waitCA(t, hcClientCA, "Prepared", time.Minute, func(ca *rotationv1alpha1.CertificateAuthority) bool {
		return ca.Status.Phase == rotationv1alpha1.PhasePrepared
	})
	if ca.Status.Trust == nil || ca.Status.Trust.Consumers != 1 {
		t.Fatalf("Prepared with trust %+v; want the one consumer %s counted", ca.Status.Trust, hcConsumer)
	}
	t.Logf("rotation of %s Prepared %s after Start (trust-sync's report)", hcClientCA, time.Since(start).Round(100*time.Millisecond))
	// kube-apiserver's file holds the new CA (trust-sync's report said so).
	newCA := firstCertificate(t, ca.Status.TrustBundle)
	if !fileHolds(t, cluster.ClientCAFile(), newCA) {
		t.Fatal("kube-apiserver's client CA file does not hold the new CA")
	}

	serial := old.SerialNumber.Text(16)
	ca = waitCA(t, hcClientCA, "counting the kubelet's certificate", 30*time.Second, func(ca *rotationv1alpha1.CertificateAuthority) bool {
		return ca.Status.PendingRenewal >= 1 && slices.ContainsFunc(ca.Status.PendingRenewals, func(p rotationv1alpha1.PendingRenewal) bool {
			return strings.EqualFold(p.SerialNumber, serial)
		})
	})
	status := rekeyStatus(t, hcClientCA)
	if !strings.Contains(status, "system:node:"+framework.KubeNodeName) {
		t.Fatalf("kubectl rekey status does not list the kubelet's certificate:\n%s", status)
	}
	t.Logf("PENDING %d, the kubelet's certificate among them:\n%s", ca.Status.PendingRenewal, status)

	// The kubelet renews at a jittered 70-90% of its certificate's
	// lifetime.
	deadline := old.NotBefore.Add(old.NotAfter.Sub(old.NotBefore) * 9 / 10)
	t.Logf("the kubelet renews by %s (%s from now)", deadline.UTC().Format(time.RFC3339), time.Until(deadline).Round(time.Second))
	var renewed *x509.Certificate
	framework.Eventually(t, time.Until(deadline)+2*time.Minute, "the kubelet's renewal", func(context.Context) error {
		c, err := readCertificate(filepath.Join(n.certDir, "kubelet-client-current.pem"))
		if err != nil {
			return err
		}
		if c.Equal(old) {
			return fmt.Errorf("still serial %x", old.SerialNumber)
		}
		renewed = c
		return nil
	})
	renewedAt := time.Now()
	verifyIn(t, renewed, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: newCA.Raw})), x509.ExtKeyUsageClientAuth)
	renewal := nativeCSRWith(t, kubeletClientSigner, renewed)
	t.Logf("the kubelet renewed through CSR %s (by %s, approved by %v) %s after Prepared: serial %x from the new CA",
		renewal.Name, renewal.Spec.Username, approvalManagers(renewal), renewedAt.Sub(ca.Status.LastInitiationFinishedTime.Time).Round(time.Second), renewed.SerialNumber)

	waitCA(t, hcClientCA, "nothing pending", time.Minute, func(ca *rotationv1alpha1.CertificateAuthority) bool {
		return ca.Status.PendingRenewal == 0
	})
	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, hcClientCA, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCA(t, hcClientCA, "Completed", time.Minute, func(ca *rotationv1alpha1.CertificateAuthority) bool {
		return ca.Status.Phase == rotationv1alpha1.PhaseCompleted
	})
	t.Logf("rotation Completed without force %s after Start", time.Since(start).Round(time.Second))

	// trust-sync drops the old CA from kube-apiserver's file, which
	// kube-apiserver reloads on the change; the kubelet, on its renewed
	// certificate, keeps renewing its Lease and its Node stays Ready.
	framework.Eventually(t, time.Minute, "the old CA out of kube-apiserver's client CA file", func(context.Context) error {
		if fileHolds(t, cluster.ClientCAFile(), oldCA) {
			return fmt.Errorf("still there")
		}
		return nil
	})
	dropped := time.Now()
	framework.Eventually(t, time.Minute, "the kubelet's Lease renewed 20s after the old CA was dropped", func(ctx context.Context) error {
		lease, err := cluster.Admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, framework.KubeNodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if lease.Spec.RenewTime == nil || lease.Spec.RenewTime.Time.Before(dropped.Add(20*time.Second)) {
			return fmt.Errorf("renewed %v", lease.Spec.RenewTime)
		}
		return nil
	})
	if err := cluster.WaitNodeReady(10*time.Second, time.Time{}); err != nil {
		t.Fatal(err)
	}
}

// waitCA waits until the CA is as ok wants it and returns it.
func waitCA(t *testing.T, name, what string, timeout time.Duration, ok func(*rotationv1alpha1.CertificateAuthority) bool) *rotationv1alpha1.CertificateAuthority {
	t.Helper()
	var ca *rotationv1alpha1.CertificateAuthority
	framework.Eventually(t, timeout, "CA "+name+" "+what, func(ctx context.Context) error {
		var err error
		if ca, err = cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if !ok(ca) {
			return fmt.Errorf("phase %q, pending %d %+v, trust %+v, conditions %+v", ca.Status.Phase, ca.Status.PendingRenewal, ca.Status.PendingRenewals,
				ca.Status.Trust, ca.Status.Conditions)
		}
		return nil
	})
	return ca
}

// rekeyStatus is `kubectl rekey status NAME`.
func rekeyStatus(t *testing.T, name string) string {
	t.Helper()
	plugin := framework.Binary(t, "kubectl-rekey")
	env := []string{"PATH=" + filepath.Dir(plugin) + string(os.PathListSeparator) + os.Getenv("PATH")}
	out, stderr, err := framework.RunKubectlWithEnv(t, cluster.AdminKubeconfig, env, nil, "rekey", "status", name)
	if err != nil {
		t.Fatalf("kubectl rekey status %s: %v\n%s%s", name, err, out, stderr)
	}
	return out
}

// firstCertificate is the first certificate of a trust bundle: the CA
// that signs.
func firstCertificate(t *testing.T, bundle string) *x509.Certificate {
	t.Helper()
	c, err := readCertificatePEM([]byte(bundle))
	if err != nil {
		t.Fatalf("the trust bundle: %v", err)
	}
	return c
}

// fileHolds says whether the PEM file holds cert.
func fileHolds(t *testing.T, path string, cert *x509.Certificate) bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return false
		}
		if bytes.Equal(block.Bytes, cert.Raw) {
			return true
		}
	}
}
