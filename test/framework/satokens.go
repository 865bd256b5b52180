package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// serviceAccountKeyFlags are kube-apiserver's key-file flags, which it
// refuses beside --service-account-signing-endpoint.
var serviceAccountKeyFlags = []string{"--service-account-key-file", "--service-account-signing-key-file"}

// JWTSignersGroup is the group of the signers' users, which the FlowSchema
// rekey-jwt-signer (artifacts/rbac/jwt-signer-flowcontrol.yaml) puts in a
// priority level of their own.
const JWTSignersGroup = "rekey:jwt-signers"

// JWTSignerRole is the ClusterRole artifacts/rbac/jwt-signer.yaml ships
// for rekey-agent jwt-signer.
const JWTSignerRole = "rekey:jwt-signer"

// withoutFlags returns args without the flags named (given as "--name",
// matched in their "--name=value" form).
func withoutFlags(args []string, names ...string) []string {
	var out []string
	for _, a := range args {
		if !slices.ContainsFunc(names, func(n string) bool { return a == n || strings.HasPrefix(a, n+"=") }) {
			out = append(out, a)
		}
	}
	return out
}

// RestartKubeAPIServerWithSigningEndpoint stops kube-apiserver and starts
// it again on the same port and storage with its service-account tokens
// signed and verified by the external signer listening on socket: the
// cluster's flags without --service-account-key-file and
// --service-account-signing-key-file (kube-apiserver refuses them beside
// the endpoint), --service-account-issuer kept, and extraArgs. It waits
// for /readyz, which kube-apiserver reaches only after the signer answered
// its first FetchKeys and Metadata. RestartKubeAPIServer goes back to the
// key files.
func (c *Cluster) RestartKubeAPIServerWithSigningEndpoint(socket string, extraArgs ...string) error {
	c.KubeAPIServer.Stop(5 * time.Second)
	c.kubeAPIServerStarts++
	name := "kube-apiserver-" + strconv.Itoa(c.kubeAPIServerStarts)
	args := append(withoutFlags(c.kubeAPIServerArgs, serviceAccountKeyFlags...), "--service-account-signing-endpoint="+socket)
	var err error
	if c.KubeAPIServer, err = Start(c.Dir, name, c.kubeAPIServer, append(args, extraArgs...)...); err != nil {
		return err
	}
	return c.waitKubeAPIServer()
}

// SecondKubeAPIServer is one more kube-apiserver of the cluster, on its
// etcd, as a second control-plane host would run it.
type SecondKubeAPIServer struct {
	Name    string
	URL     string
	Process *Process
	// AdminKubeconfig and Admin reach this kube-apiserver as a member of
	// system:masters.
	AdminKubeconfig string
	AdminConfig     *rest.Config
	Admin           kubernetes.Interface
}

// StartSecondKubeAPIServer starts another kube-apiserver on the cluster's
// etcd with the cluster's flags, on a port of its own, logging to
// NAME.log (its audit log, if the cluster has one, to NAME-audit.log), its
// service-account tokens signed by the external signer at
// signingEndpoint (none: the cluster's key files), and extraArgs; it
// waits for /readyz. Stop it with Stop.
func (c *Cluster) StartSecondKubeAPIServer(name, signingEndpoint string, extraArgs ...string) (*SecondKubeAPIServer, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	s := &SecondKubeAPIServer{Name: name, URL: fmt.Sprintf("https://127.0.0.1:%d", ports[0])}
	drop := []string{"--secure-port", "--cert-dir", "--audit-log-path"}
	args := append(withoutFlags(c.kubeAPIServerArgs, drop...),
		"--secure-port="+strconv.Itoa(ports[0]),
		"--cert-dir="+filepath.Join(c.Dir, name+"-cert-dir"))
	if slices.ContainsFunc(c.kubeAPIServerArgs, func(a string) bool { return strings.HasPrefix(a, "--audit-log-path=") }) {
		// One log per server: the tests that read the first one's do not
		// see the second's requests.
		args = append(args, "--audit-log-path="+filepath.Join(c.Dir, name+"-audit.log"))
	}
	if signingEndpoint != "" {
		args = append(withoutFlags(args, serviceAccountKeyFlags...), "--service-account-signing-endpoint="+signingEndpoint)
	}
	if s.AdminKubeconfig, err = c.UserKubeconfigAt(s.URL, "e2e-admin", "system:masters"); err != nil {
		return nil, err
	}
	if s.AdminConfig, err = clientcmd.BuildConfigFromFlags("", s.AdminKubeconfig); err != nil {
		return nil, err
	}
	s.AdminConfig.QPS, s.AdminConfig.Burst = 500, 1000
	if s.Admin, err = kubernetes.NewForConfig(s.AdminConfig); err != nil {
		return nil, err
	}
	if s.Process, err = Start(c.Dir, name, c.kubeAPIServer, append(args, extraArgs...)...); err != nil {
		return nil, err
	}
	if err := waitReadyz(name, s.Process, s.Admin); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Stop stops the second kube-apiserver (nothing when it never started).
func (s *SecondKubeAPIServer) Stop() {
	if s != nil {
		s.Process.Stop(10 * time.Second)
	}
}

// JWTSignerOptions configures StartJWTSigner.
type JWTSignerOptions struct {
	// Name names the signer's files (NAME.sock, NAME-cache.json,
	// NAME-N.log in the cluster's directory) and its user,
	// rekey:jwt-signer:NAME.
	Name string
	// CertificateAuthority is the ServiceAccountTokens CA it signs with.
	CertificateAuthority string
	// TrustConsumer is the TrustConsumer it registers and reports as
	// (kube-apiserver-jwt.NAME when empty).
	TrustConsumer string
	// RefreshHint is FetchKeys' refresh_hint_seconds (the signer's
	// default when zero).
	RefreshHint time.Duration
	// Server is the kube-apiserver its kubeconfig points at (the
	// cluster's first when empty).
	Server string
	// ExtraArgs are more flags.
	ExtraArgs []string
}

// JWTSigner is a running `rekey-agent jwt-signer`: the endpoint a
// kube-apiserver started with --service-account-signing-endpoint=Socket
// dials.
type JWTSigner struct {
	Socket, CacheFile, User, Kubeconfig, TrustConsumer string
	// MetricsAddress is where it serves /metrics.
	MetricsAddress string
	Process        *Process
	dir, name      string
	args           []string
	starts         int
}

// StartJWTSigner runs `rekey-agent jwt-signer` (the test binary) for the
// rest of the test as a user of its own (a client certificate of the
// cluster's client CA, as a control-plane host's signer has, in the group
// rekey:jwt-signers) bound to rekey:jwt-signer and nothing else. It waits until the signer
// wrote its cache file (what it answers FetchKeys from), so that a
// kube-apiserver may start on its socket. The signer is killed at the
// test's end; its log is in the cluster's directory.
func (c *Cluster) StartJWTSigner(t testing.TB, opts JWTSignerOptions) *JWTSigner {
	t.Helper()
	bin, err := BinaryPath("rekey-agent")
	if err != nil {
		t.Fatal(err)
	}
	server := opts.Server
	if server == "" {
		server = c.KubeAPIURL
	}
	s := &JWTSigner{
		// The cluster's directory, not t.TempDir(): a Unix socket's path
		// is limited to 107 bytes.
		Socket:        filepath.Join(c.Dir, opts.Name+".sock"),
		CacheFile:     filepath.Join(c.Dir, opts.Name+"-cache.json"),
		User:          "rekey:jwt-signer:" + opts.Name,
		TrustConsumer: opts.TrustConsumer,
		dir:           c.Dir,
		name:          opts.Name,
	}
	if s.TrustConsumer == "" {
		s.TrustConsumer = "kube-apiserver-jwt." + opts.Name
	}
	if s.Kubeconfig, err = c.UserKubeconfigAt(server, s.User, JWTSignersGroup); err != nil {
		t.Fatal(err)
	}
	if err := c.bindJWTSigner(s.User); err != nil {
		t.Fatal(err)
	}
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	s.MetricsAddress = fmt.Sprintf("127.0.0.1:%d", ports[0])
	s.args = []string{"jwt-signer",
		"--kubeconfig=" + s.Kubeconfig,
		"--certificate-authority=" + opts.CertificateAuthority,
		"--socket=" + s.Socket,
		"--cache-file=" + s.CacheFile,
		"--trust-consumer=" + s.TrustConsumer,
		"--metrics-bind-address=" + s.MetricsAddress,
	}
	if opts.RefreshHint > 0 {
		s.args = append(s.args, "--refresh-hint="+opts.RefreshHint.String())
	}
	s.args = append(s.args, opts.ExtraArgs...)
	t.Cleanup(func() {
		if t.Failed() && s.Process != nil {
			t.Logf("%s log tail:\n%s", s.name, s.Process.LogTail(6000))
		}
		s.Process.Kill()
	})
	s.start(t, bin)
	return s
}

func (s *JWTSigner) start(t testing.TB, bin string) {
	t.Helper()
	s.starts++
	var err error
	if s.Process, err = Start(s.dir, fmt.Sprintf("%s-%d", s.name, s.starts), bin, s.args...); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 60*time.Second, s.name+" writing its cache file and listening", func(context.Context) error {
		if s.Process.Exited() {
			return Permanent(fmt.Errorf("%s exited:\n%s", s.name, s.Process.LogTail(4000)))
		}
		if fi, err := os.Stat(s.CacheFile); err != nil || fi.Size() == 0 {
			return fmt.Errorf("cache file %s: %v (size %v)", s.CacheFile, err, fi)
		}
		if _, err := os.Stat(s.Socket); err != nil {
			return err
		}
		return nil
	})
}

// Kill ends the signer with SIGKILL, as a crash would: its socket file
// and cache stay behind.
func (s *JWTSigner) Kill() { s.Process.Kill() }

// Restart starts the signer again with the same flags, socket and cache
// file (after Kill or by itself), and waits as StartJWTSigner does.
func (s *JWTSigner) Restart(t testing.TB) {
	t.Helper()
	s.Process.Kill()
	bin, err := BinaryPath("rekey-agent")
	if err != nil {
		t.Fatal(err)
	}
	s.start(t, bin)
}

// bindJWTSigner binds user to rekey:jwt-signer, the shipped role, which
// carries all a signer needs (signjwt, the CA's watch, its TrustConsumer
// and trust on the CA).
func (c *Cluster) bindJWTSigner(user string) error {
	_, err := c.Admin.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e:" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: JWTSignerRole},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("binding %s to %s: %w", user, JWTSignerRole, err)
	}
	return nil
}
