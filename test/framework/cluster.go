package framework

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/pkg/standalone"
)

const (
	// RekeyNamespace and RekeyService name the Service the APIService points at.
	RekeyNamespace = "rekey-system"
	RekeyService   = "rekey-apiserver"
	// RekeyServiceAccountUser is the identity rekey-apiserver uses against
	// the kube-apiserver: the ServiceAccount the artifacts bind roles to.
	RekeyServiceAccountUser = "system:serviceaccount:rekey-system:rekey-apiserver"

	certValidity = 24 * time.Hour

	// KubernetesServiceIP is the default/kubernetes Service's ClusterIP
	// (the first of --service-cluster-ip-range).
	KubernetesServiceIP = "10.96.0.1"
)

// APIServiceNames are rekey's APIServices.
var APIServiceNames = []string{"v1alpha1.certificates.rekey.io", "v1alpha1.rotation.rekey.io", "v1alpha1.attestation.rekey.io"}

// Cluster is a real control plane on loopback: etcd, kube-apiserver with
// RBAC, Node authorization and the aggregation layer, and rekey-apiserver
// registered through an APIService.
type Cluster struct {
	Dir             string
	EtcdURL         string
	KubeAPIURL      string
	RekeyPort       int
	AdminKubeconfig string
	// RekeyKubeconfig is rekey-apiserver's own identity against kube-apiserver.
	RekeyKubeconfig string
	ServingCA       *pki.KeyPair
	ClientCA        *pki.KeyPair
	RekeyServingCA  *pki.KeyPair

	Etcd, KubeAPIServer, Rekey *Process
	Admin                      kubernetes.Interface
	RekeyAdmin                 clientset.Interface
	rekeyArgs                  []string
	rekeyEnv                   []string
	rekeyBinary                string
	hostIP                     string
	// kubeAPIServer and kubeAPIServerArgs are how kube-apiserver was
	// started (RestartKubeAPIServer starts it so again); starts counts
	// its starts, which name their log files.
	kubeAPIServer       string
	kubeAPIServerArgs   []string
	kubeAPIServerStarts int
}

// ClusterOptions tunes StartCluster.
type ClusterOptions struct {
	// RekeyArgs are extra flags for rekey-apiserver.
	RekeyArgs []string
	// KubeAPIServerArgs are extra flags for kube-apiserver; they win over
	// the defaults.
	KubeAPIServerArgs []string
	// Logf receives progress lines.
	Logf func(format string, args ...any)
	// HostIP, when set, makes the control plane reachable from pods on
	// this host (kube-apiserver listens on it too and routes to an
	// APIService's endpoints), and neither rekey's artifacts are applied
	// nor rekey started: the test installs rekey into the cluster.
	HostIP string
	// RevocationWebhookAuthorizer starts kube-apiserver with
	// --authorization-config (in place of --authorization-mode=Node,RBAC):
	// rekey's revocation webhook first, then Node and RBAC, as
	// docs/revocation.md gives it (RevocationAuthorizationConfiguration).
	// Not with HostIP.
	RevocationWebhookAuthorizer bool
	// RevocationFailurePolicy is the webhook's failurePolicy:
	// RevocationFailOpen (NoOpinion, the default) or RevocationFailClosed
	// (Deny). Both files are written; RevocationAuthorizationConfigPath
	// names them.
	RevocationFailurePolicy string
}

// StartCluster builds what is missing (hack/build-tools.sh, cached) and
// starts the control plane in dir. Call Stop when done.
func StartCluster(dir, rekeyBinary string, opts ClusterOptions) (*Cluster, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	toolsDir, err := BuildTools("etcd", "kube-apiserver")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, rekeyBinary: rekeyBinary, rekeyArgs: opts.RekeyArgs, hostIP: opts.HostIP}
	if err := c.makePKI(); err != nil {
		return nil, err
	}
	ports, err := FreePorts(4)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, kubePort := ports[0], ports[1], ports[2]
	c.RekeyPort = ports[3]
	c.EtcdURL = fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	c.KubeAPIURL = fmt.Sprintf("https://127.0.0.1:%d", kubePort)

	logf("starting etcd on %s", c.EtcdURL)
	c.Etcd, err = Start(dir, "etcd", filepath.Join(toolsDir, "etcd"),
		"--name=e2e", "--data-dir="+filepath.Join(dir, "etcd-data"),
		"--listen-client-urls="+c.EtcdURL, "--advertise-client-urls="+c.EtcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL, "--log-level=warn", "--quota-backend-bytes=4294967296")
	if err != nil {
		return nil, err
	}

	p := func(name string) string { return filepath.Join(dir, "pki", name) }
	authorization := "--authorization-mode=Node,RBAC"
	if opts.RevocationWebhookAuthorizer {
		if opts.HostIP != "" {
			c.Stop()
			return nil, fmt.Errorf("RevocationWebhookAuthorizer needs rekey on loopback (no HostIP)")
		}
		// rekey starts after kube-apiserver, but its port and the serving
		// CA it starts with are the harness's, known now: the webhook's
		// kubeconfig can be written before either starts, and kube-apiserver
		// asks the webhook only when a request comes.
		if err := c.writeRevocationAuthorization(); err != nil {
			c.Stop()
			return nil, err
		}
		policy := opts.RevocationFailurePolicy
		if policy == "" {
			policy = RevocationFailOpen
		}
		authorization = "--authorization-config=" + c.RevocationAuthorizationConfigPath(policy)
	}
	logf("starting kube-apiserver on %s", c.KubeAPIURL)
	c.kubeAPIServer = filepath.Join(toolsDir, "kube-apiserver")
	c.kubeAPIServerArgs = append([]string{
		"--etcd-servers=" + c.EtcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(kubePort),
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + p("kube-apiserver.crt"), "--tls-private-key-file=" + p("kube-apiserver.key"),
		"--client-ca-file=" + p("client-ca.crt"),
		authorization,
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-key-file=" + p("sa.pub"), "--service-account-signing-key-file=" + p("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--requestheader-client-ca-file=" + p("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p("front-proxy-client.crt"), "--proxy-client-key-file=" + p("front-proxy-client.key"),
		"--cert-dir=" + filepath.Join(dir, "kube-cert-dir"),
		"--profiling=false",
	}, append(inClusterArgs(opts.HostIP), opts.KubeAPIServerArgs...)...)
	c.KubeAPIServer, err = c.startKubeAPIServer(nil)
	if err != nil {
		c.Stop()
		return nil, err
	}
	if c.AdminKubeconfig, err = c.UserKubeconfig("e2e-admin", "system:masters"); err != nil {
		c.Stop()
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig)
	if err != nil {
		c.Stop()
		return nil, err
	}
	cfg.QPS, cfg.Burst = 500, 1000
	c.Admin = kubernetes.NewForConfigOrDie(cfg)
	if err := c.waitKubeAPIServer(); err != nil {
		c.Stop()
		return nil, err
	}

	c.RekeyAdmin = clientset.NewForConfigOrDie(rest.CopyConfig(cfg))
	if opts.HostIP != "" {
		return c, nil
	}
	logf("applying artifacts")
	if err := c.applyArtifacts(); err != nil {
		c.Stop()
		return nil, err
	}
	if c.RekeyKubeconfig, err = c.serviceAccountKubeconfig(RekeyNamespace, "rekey-apiserver"); err != nil {
		c.Stop()
		return nil, err
	}
	logf("starting rekey-apiserver on port %d", c.RekeyPort)
	if err := c.StartRekey(); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// startKubeAPIServer starts kube-apiserver with the cluster's flags and
// extraArgs (which win), its log in kube-apiserver.log, then
// kube-apiserver-2.log and so on for each restart.
func (c *Cluster) startKubeAPIServer(extraArgs []string) (*Process, error) {
	c.kubeAPIServerStarts++
	name := "kube-apiserver"
	if c.kubeAPIServerStarts > 1 {
		name += "-" + strconv.Itoa(c.kubeAPIServerStarts)
	}
	return Start(c.Dir, name, c.kubeAPIServer, append(append([]string(nil), c.kubeAPIServerArgs...), extraArgs...)...)
}

// waitKubeAPIServer waits for kube-apiserver's /readyz.
func (c *Cluster) waitKubeAPIServer() error {
	return waitReadyz("kube-apiserver", c.KubeAPIServer, c.Admin)
}

// waitReadyz waits for the /readyz of a kube-apiserver process (named
// name in errors) through admin, and gives up at once if it exits.
func waitReadyz(name string, p *Process, admin kubernetes.Interface) error {
	if err := waitFor(120*time.Second, func() error {
		if p.Exited() {
			return fmt.Errorf("%s exited (%w):\n%s", name, errExited, p.LogTail(4000))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		body, err := admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return err
		}
		if string(body) != "ok" {
			return fmt.Errorf("readyz: %s", body)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("%s not ready: %w\n%s", name, err, p.LogTail(4000))
	}
	return nil
}

// RestartKubeAPIServer stops kube-apiserver and starts it again on the
// same port and storage with the cluster's flags and extraArgs (which win;
// none: as first started), for flags it reads only when it starts (such as
// --kubelet-certificate-authority, which it re-reads only every 5
// minutes), and waits for it to be ready. Whatever watches through it
// (rekey, the controllers, the kubelet) reconnects by itself.
func (c *Cluster) RestartKubeAPIServer(extraArgs ...string) error {
	// Its state is in etcd: a short grace is enough (it can take 30s
	// to end by itself with watches open).
	c.KubeAPIServer.Stop(5 * time.Second)
	var err error
	if c.KubeAPIServer, err = c.startKubeAPIServer(extraArgs); err != nil {
		return err
	}
	return c.waitKubeAPIServer()
}

// inClusterArgs are kube-apiserver's flags for a cluster whose pods reach
// it at hostIP (none without one): it listens there too, and the
// aggregator dials an APIService's endpoints (there is no kube-proxy).
func inClusterArgs(hostIP string) []string {
	if hostIP == "" {
		return nil
	}
	return []string{
		"--bind-address=0.0.0.0", "--advertise-address=" + hostIP,
		"--enable-aggregator-routing=true",
		"--kubelet-preferred-address-types=InternalIP",
	}
}

// StartRekey starts (or restarts) rekey-apiserver in aggregated mode and
// waits for its APIService to be Available.
func (c *Cluster) StartRekey() error {
	var err error
	c.Rekey, err = StartWithEnv(c.Dir, "rekey-apiserver", c.rekeyBinary, c.rekeyEnv, c.rekeyServerArgs(c.RekeyPort)...)
	if err != nil {
		return err
	}
	return waitFor(120*time.Second, func() error {
		if c.Rekey.Exited() {
			return fmt.Errorf("rekey-apiserver exited:\n%s", c.Rekey.LogTail(4000))
		}
		for _, name := range APIServiceNames {
			out, err := c.kubectl(nil, "get", "apiservice", name, "-o", `jsonpath={.status.conditions[?(@.type=="Available")].status}`)
			if err != nil {
				return err
			}
			if strings.TrimSpace(out) != "True" {
				msg, _ := c.kubectl(nil, "get", "apiservice", name, "-o", `jsonpath={.status.conditions[?(@.type=="Available")].message}`)
				return fmt.Errorf("APIService %s not Available yet: %s", name, msg)
			}
		}
		return nil
	})
}

// StartRekeyReplica starts one more rekey-apiserver on port, with the
// same flags and storage (so it follows the elected replica), logging in
// dir, and returns without waiting for it: the APIServices keep pointing
// at the first. The caller stops it.
func (c *Cluster) StartRekeyReplica(dir string, port int) (*Process, error) {
	return StartWithEnv(dir, "rekey-apiserver-replica", c.rekeyBinary, c.rekeyEnv, c.rekeyServerArgs(port)...)
}

func (c *Cluster) rekeyServerArgs(port int) []string {
	p := func(name string) string { return filepath.Join(c.Dir, "pki", name) }
	return append([]string{
		"--etcd-servers=" + c.EtcdURL, "--etcd-prefix=/rekey.io",
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + p("rekey-serving.crt"), "--tls-private-key-file=" + p("rekey-serving.key"),
		"--authentication-kubeconfig=" + c.RekeyKubeconfig,
		"--authorization-kubeconfig=" + c.RekeyKubeconfig,
		"--kubeconfig=" + c.RekeyKubeconfig,
		"--ca-key-encryption-key-file=" + p("ca-kek.key"),
	}, c.rekeyArgs...)
}

// Stop ends every process, rekey first.
func (c *Cluster) Stop() {
	c.Rekey.Stop(20 * time.Second)
	c.KubeAPIServer.Stop(30 * time.Second)
	c.Etcd.Stop(10 * time.Second)
}

func (c *Cluster) kubectl(stdin []byte, args ...string) (string, error) {
	kubectl, err := findKubectl()
	if err != nil {
		return "", err
	}
	stdout, stderr, err := runKubectl(kubectl, c.AdminKubeconfig, filepath.Join(c.Dir, "kubectl-cache"), nil, stdin, args...)
	if err != nil {
		return stdout, fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr)
	}
	return stdout, nil
}

// RestartRekey stops rekey-apiserver and starts it again with extra flags
// added to the cluster's (none: as configured).
func (c *Cluster) RestartRekey(extraArgs ...string) error {
	return c.RestartRekeyWithEnv(nil, extraArgs...)
}

// KillRekey kills rekey-apiserver with SIGKILL: nothing it was doing
// finishes.
func (c *Cluster) KillRekey() {
	if c.Rekey != nil {
		c.Rekey.Kill()
	}
}

// RestartRekeyWithEnv is RestartRekey with extra environment variables for
// this start only.
func (c *Cluster) RestartRekeyWithEnv(env []string, extraArgs ...string) error {
	c.rekeyEnv = env
	defer func() { c.rekeyEnv = nil }()
	if c.Rekey != nil {
		c.Rekey.Stop(30 * time.Second)
	}
	base := c.rekeyArgs
	c.rekeyArgs = append(append([]string(nil), base...), extraArgs...)
	defer func() { c.rekeyArgs = base }()
	return c.StartRekey()
}

// DirectToRekey returns a copy of cfg that reaches rekey-apiserver itself,
// not through kube-apiserver, trusting the harness's serving CA (for what
// only rekey answers, such as its own /metrics and /debug/pprof).
func (c *Cluster) DirectToRekey(cfg *rest.Config) *rest.Config {
	return c.DirectToRekeyAt(cfg, c.RekeyPort)
}

// DirectToRekeyAt is DirectToRekey for a replica on port.
func (c *Cluster) DirectToRekeyAt(cfg *rest.Config, port int) *rest.Config {
	direct := rest.CopyConfig(cfg)
	direct.Host = fmt.Sprintf("https://127.0.0.1:%d", port)
	direct.TLSClientConfig.CAData, direct.TLSClientConfig.CAFile = c.RekeyServingCA.CertPEM(), ""
	return direct
}

// RestartRekeyWithHarnessServing stops rekey-apiserver, puts the harness's
// serving CA back in the APIServices, and starts rekey with the harness's
// serving certificate: after a test in which rekey served with (and kept
// the APIServices on) its own CA. In this order no rekey rewrites the
// caBundle after it is restored, and the start's wait for the APIServices
// to be Available checks the certificate they will use.
func (c *Cluster) RestartRekeyWithHarnessServing() error {
	if c.Rekey != nil {
		c.Rekey.Stop(30 * time.Second)
	}
	if err := c.applyArtifacts(); err != nil {
		return err
	}
	return c.StartRekey()
}

// applyArtifacts applies artifacts/deploy and artifacts/rbac as an operator
// would, with the two changes a loopback run needs: the Service becomes an
// ExternalName to localhost on rekey's port, and the APIService gets the
// real caBundle of rekey's serving CA and that port.
func (c *Cluster) applyArtifacts() error {
	root := RepoRoot()
	// The custom signer example is a pattern, not installed; the tests bind
	// its roles. host-cluster.yaml is opt-in; the tests of Signers with
	// spec.hostCluster need it.
	for _, f := range []string{"deploy/base/namespace.yaml", "deploy/base/rbac.yaml", "rbac/custom-signer-example.yaml", "rbac/host-cluster.yaml"} {
		if _, err := c.kubectl(nil, "apply", "-f", filepath.Join(root, "artifacts", f)); err != nil {
			return err
		}
	}
	if _, err := c.kubectl(nil, "apply", "-k", filepath.Join(root, "artifacts", "rbac")); err != nil {
		return err
	}
	service := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %s
  namespace: %s
spec:
  type: ExternalName
  externalName: localhost
  ports:
  - name: https
    port: %d
`, RekeyService, RekeyNamespace, c.RekeyPort)
	if _, err := c.kubectl([]byte(service), "apply", "-f", "-"); err != nil {
		return err
	}
	apiservice, err := os.ReadFile(filepath.Join(root, "artifacts", "deploy", "base", "apiservice.yaml"))
	if err != nil {
		return err
	}
	if bytes.Contains(apiservice, []byte("insecureSkipTLSVerify: true")) {
		return fmt.Errorf("artifacts/deploy/base/apiservice.yaml must not skip TLS verification")
	}
	rendered := strings.ReplaceAll(string(apiservice), "  service:\n", "  caBundle: "+base64.StdEncoding.EncodeToString(c.RekeyServingCA.CertPEM())+"\n  service:\n")
	rendered = strings.ReplaceAll(rendered, "    port: 443", fmt.Sprintf("    port: %d", c.RekeyPort))
	_, err = c.kubectl([]byte(rendered), "apply", "-f", "-")
	return err
}

func (c *Cluster) makePKI() error {
	dir := filepath.Join(c.Dir, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	var err error
	if c.ServingCA, err = pki.NewCA("e2e-kube-serving-ca", certValidity); err != nil {
		return err
	}
	// The CAs whose signatures servers verify on every request are RSA-2048,
	// as kubeadm makes them.
	if c.ClientCA, err = pki.NewClientCA("e2e-client-ca", certValidity); err != nil {
		return err
	}
	frontProxyCA, err := pki.NewClientCA("e2e-front-proxy-ca", certValidity)
	if err != nil {
		return err
	}
	if c.RekeyServingCA, err = pki.NewCA("e2e-rekey-serving-ca", certValidity); err != nil {
		return err
	}
	kubeServing, err := c.ServingCA.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default.svc"},
		IPAddresses: kubeAPIServerIPs(c.hostIP),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, certValidity)
	if err != nil {
		return err
	}
	proxyClient, err := frontProxyCA.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "front-proxy-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, certValidity)
	if err != nil {
		return err
	}
	rekeyServing, err := c.RekeyServingCA.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: RekeyService + "." + RekeyNamespace + ".svc"},
		DNSNames:    []string{RekeyService + "." + RekeyNamespace + ".svc", "localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, certValidity)
	if err != nil {
		return err
	}
	for name, kp := range map[string]*pki.KeyPair{
		"serving-ca": c.ServingCA, "client-ca": c.ClientCA, "front-proxy-ca": frontProxyCA,
		"kube-apiserver": kubeServing, "front-proxy-client": proxyClient, "rekey-serving": rekeyServing,
	} {
		if err := kp.Write(p(name+".crt"), p(name+".key")); err != nil {
			return err
		}
	}
	kek := make([]byte, 32)
	if _, err := rand.Read(kek); err != nil {
		return err
	}
	if err := pki.WriteFileAtomic(p("ca-kek.key"), kek, 0o600); err != nil {
		return err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	if err := pki.WriteFileAtomic(p("sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}), 0o600); err != nil {
		return err
	}
	return pki.WriteFileAtomic(p("sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}), 0o644)
}

// kubeAPIServerIPs are the addresses in kube-apiserver's certificate:
// loopback, the kubernetes Service's ClusterIP and the host's address when
// pods reach it there.
func kubeAPIServerIPs(hostIP string) []net.IP {
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(KubernetesServiceIP)}
	if hostIP != "" {
		ips = append(ips, net.ParseIP(hostIP))
	}
	return ips
}

// serviceAccountKubeconfig writes a kubeconfig with a token of the
// ServiceAccount (made by TokenRequest), the identity rekey-apiserver has
// when installed in a cluster: kube-apiserver authenticates it from its
// token cache rather than by verifying a certificate chain per request.
func (c *Cluster) serviceAccountKubeconfig(namespace, name string) (string, error) {
	req, err := c.Admin.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of ServiceAccount %s/%s: %w", namespace, name, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kube"] = &clientcmdapi.Cluster{Server: c.KubeAPIURL, CertificateAuthorityData: c.ServingCA.CertPEM()}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: req.Status.Token}
	cfg.Contexts["kube"] = &clientcmdapi.Context{Cluster: "kube", AuthInfo: name}
	cfg.CurrentContext = "kube"
	path := filepath.Join(c.Dir, "kubeconfig-sa-"+sanitize(namespace+"-"+name))
	return path, clientcmd.WriteToFile(*cfg, path)
}

// UserKubeconfig writes a kubeconfig for the kube-apiserver that
// authenticates as user in groups with a client certificate, and returns
// its path.
func (c *Cluster) UserKubeconfig(user string, groups ...string) (string, error) {
	return c.UserKubeconfigAt(c.KubeAPIURL, user, groups...)
}

// UserKubeconfigAt is UserKubeconfig for another kube-apiserver of the
// cluster (one StartSecondKubeAPIServer started) at server.
func (c *Cluster) UserKubeconfigAt(server, user string, groups ...string) (string, error) {
	kp, err := c.ClientCA.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, certValidity)
	if err != nil {
		return "", err
	}
	keyPEM, err := kp.KeyPEM()
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, "kubeconfig-"+sanitize(user))
	if server != c.KubeAPIURL {
		path += "-" + sanitize(strings.TrimPrefix(server, "https://"))
	}
	return path, standalone.WriteKubeconfig(path, server, c.ServingCA.CertPEM(), user, kp.CertPEM(), keyPEM)
}

// ClientCertificate writes a client certificate of the cluster's client CA
// for user in groups, and its key, into the cluster's pki directory (as
// name.crt and name.key), and returns their paths: a certificate for a
// flag that takes files, such as kube-apiserver's
// --kubelet-client-certificate.
func (c *Cluster) ClientCertificate(name, user string, groups ...string) (certFile, keyFile string, err error) {
	kp, err := c.ClientCA.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, certValidity)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(c.Dir, "pki", name+".crt"), filepath.Join(c.Dir, "pki", name+".key")
	if err := kp.Write(certFile, keyFile); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// ClientCAFile is the path of kube-apiserver's --client-ca-file (what
// TrustClientCAs writes, or a trust-sync a test runs).
func (c *Cluster) ClientCAFile() string {
	return filepath.Join(c.Dir, "pki", "client-ca.crt")
}

// TrustClientCAs makes kube-apiserver trust client certificates of the
// given CAs (PEM) besides the framework's own client CA, as an operator
// adds a signer's trust bundle to --client-ca-file; kube-apiserver reloads
// the file by itself. Replaces what an earlier call added.
func (c *Cluster) TrustClientCAs(extraPEM []byte) error {
	data := append(c.ClientCA.CertPEM(), extraPEM...)
	return pki.WriteFileAtomic(filepath.Join(c.Dir, "pki", "client-ca.crt"), data, 0o644)
}

// UserClient returns a rekey clientset that talks to the kube-apiserver
// (and through the aggregator to rekey) as user in groups.
func (c *Cluster) UserClient(user string, groups ...string) (clientset.Interface, string, error) {
	path, err := c.UserKubeconfig(user, groups...)
	if err != nil {
		return nil, "", err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, "", err
	}
	cfg.QPS, cfg.Burst = 500, 1000
	client, err := clientset.NewForConfig(cfg)
	return client, path, err
}

func sanitize(s string) string {
	return strings.NewReplacer(":", "_", "/", "_", "*", "_").Replace(s)
}

// waitFor waits with EventuallyErr until check passes; an error wrapping
// errExited ends the wait at once: a dead process will not become ready.
func waitFor(timeout time.Duration, check func() error) error {
	return EventuallyErr(timeout, func(context.Context) error {
		err := check()
		if errors.Is(err, errExited) {
			return Permanent(err)
		}
		return err
	})
}
