package framework

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"rekey.io/rekey/pkg/pki"
)

// Node is a real kubelet on containerd whose client certificate comes from
// rekey-agent, as its exec credential plugin.
type Node struct {
	// devicePluginsExisted: /var/lib/kubelet was there before (another
	// kubelet's); then it is left alone.
	devicePluginsExisted bool

	Name       string
	Dir        string
	CertDir    string
	Containerd *Process
	Agent      *Process
	Kubelet    *Process
	// StartedWith is how StartNode ran the kubelet: RestartKubelet with it
	// puts the node back as it was.
	StartedWith KubeletOptions
	sock        string
}

// KubeletOptions say how a kubelet of the node runs; StartNode sets the
// first, RestartKubelet changes them.
type KubeletOptions struct {
	// Binary is the kubelet's binary.
	Binary string
	// Kubeconfig is --kubeconfig. With BootstrapKubeconfig it need not
	// exist: the kubelet then asks certificates.k8s.io for its client
	// certificate (signer kubernetes.io/kube-apiserver-client-kubelet)
	// with the bootstrap credentials, keeps it in CertDir and writes a
	// kubeconfig naming it here.
	Kubeconfig          string
	BootstrapKubeconfig string
	// CertDir is --cert-dir; empty: the node's kubelet-pki.
	CertDir string
	// RotateCertificates and ServerTLSBootstrap are the
	// KubeletConfiguration's: the kubelet renews its client certificate
	// through certificates.k8s.io, and asks there for its serving
	// certificate (signer kubernetes.io/kubelet-serving) instead of
	// making itself one.
	RotateCertificates, ServerTLSBootstrap bool
	// Address is where the kubelet's API listens; empty: 127.0.0.1, which
	// kube-apiserver does not reach (it dials the Node's InternalIP).
	Address string
	// ClientCAFile makes the kubelet's API accept clients with a
	// certificate of these CAs (kube-apiserver's
	// --kubelet-client-certificate); empty: it accepts nobody, since
	// anonymous and webhook authentication are off.
	ClientCAFile string
	// LogName names the kubelet's log file (and its configuration file)
	// in the node's directory; empty: "kubelet".
	LogName string
}

// NodeOptions say where the binaries are and how the node reaches the API.
type NodeOptions struct {
	Name                string
	Kubelet, RekeyAgent string
	// BootstrapKubeconfig is the agent's bootstrap identity against
	// kube-apiserver.
	BootstrapKubeconfig string
	// AgentArgs are extra flags for `rekey-agent run`, ExecArgs for
	// `rekey-agent exec-credential`.
	AgentArgs, ExecArgs []string
	// Kubeconfig, when set, is the kubelet's own kubeconfig and no agent
	// runs (a node of a cluster rekey is not installed in yet).
	Kubeconfig string
	// SandboxImage is containerd's pause image; Images are image tarballs
	// imported into containerd before the kubelet starts (there is no
	// registry to pull from).
	SandboxImage string
	Images       []string
}

// StartNode starts containerd, rekey-agent and, once the agent has a
// certificate, the kubelet, all under dir. Stop undoes everything the
// kubelet does outside dir (mounts, cgroups, its device-plugins directory).
func StartNode(dir string, o NodeOptions) (*Node, error) {
	sock := filepath.Join(dir, "containerd", "containerd.sock")
	n := &Node{Name: o.Name, Dir: dir, CertDir: filepath.Join(dir, "rekey"), sock: sock}
	if _, err := os.Stat("/var/lib/kubelet"); err == nil {
		n.devicePluginsExisted = true
	}
	for _, d := range []string{"containerd/root", "containerd/state", "cni", "kubelet", "kubelet-pki", "rekey", "pod-logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	files := map[string]string{
		"containerd/config.toml": fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
%s  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
`, filepath.Join(dir, "containerd/root"), filepath.Join(dir, "containerd/state"), sock, sandboxImage(o.SandboxImage), filepath.Join(dir, "cni")),
		// The address allocations are the node's own (dataDir), not
		// /var/lib/cni's: a node stopped with its pods running never
		// releases theirs, and the next node on the machine must not
		// inherit them.
		"cni/10-bridge.conflist": fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "rekey-e2e", "plugins": [
  {"type": "bridge", "bridge": "rekeye2e0", "isGateway": true, "isDefaultGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.77.0/24"}]], "dataDir": %q}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}`, filepath.Join(dir, "cni-ipam")),
		"cni/99-loopback.conf": `{"cniVersion": "0.4.0", "name": "lo", "type": "loopback"}`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return nil, err
		}
	}
	var err error
	if n.Containerd, err = Start(dir, "containerd", "containerd", "--config", filepath.Join(dir, "containerd/config.toml")); err != nil {
		return nil, err
	}
	if err := waitUntil(30*time.Second, func() bool { _, err := os.Stat(sock); return err == nil }); err != nil {
		n.Stop()
		return nil, fmt.Errorf("containerd did not start: %s", n.Containerd.LogTail(2000))
	}
	for _, image := range o.Images {
		if out, err := exec.Command("ctr", "-a", sock, "-n", "k8s.io", "images", "import", image).CombinedOutput(); err != nil {
			n.Stop()
			return nil, fmt.Errorf("importing %s into containerd: %v: %s", image, err, out)
		}
	}
	n.StartedWith = KubeletOptions{Binary: o.Kubelet, Kubeconfig: o.Kubeconfig}
	if o.Kubeconfig != "" {
		if n.Kubelet, err = n.startKubelet(n.StartedWith); err != nil {
			n.Stop()
			return nil, err
		}
		return n, nil
	}
	agentArgs := append([]string{"run", "--bootstrap-kubeconfig", o.BootstrapKubeconfig, "--cert-dir", n.CertDir, "--node-name", o.Name}, o.AgentArgs...)
	if n.Agent, err = Start(dir, "rekey-agent", o.RekeyAgent, agentArgs...); err != nil {
		n.Stop()
		return nil, err
	}
	if err := waitUntil(60*time.Second, func() bool {
		_, err := os.Lstat(filepath.Join(n.CertDir, "rekey-client-current.pem"))
		return err == nil
	}); err != nil {
		n.Stop()
		return nil, fmt.Errorf("rekey-agent got no certificate: %s", n.Agent.LogTail(2000))
	}
	// The kubelet's kubeconfig: the bootstrap kubeconfig's cluster, and
	// rekey-agent exec-credential as the user.
	bootstrap, err := clientcmd.LoadFromFile(o.BootstrapKubeconfig)
	if err != nil {
		n.Stop()
		return nil, err
	}
	cluster := bootstrap.Clusters[bootstrap.Contexts[bootstrap.CurrentContext].Cluster]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = cluster
	cfg.AuthInfos["node"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
		APIVersion: "client.authentication.k8s.io/v1", Command: o.RekeyAgent,
		Args: append([]string{"exec-credential", "--cert-dir", n.CertDir}, o.ExecArgs...), InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "node"}
	cfg.CurrentContext = "c"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		n.Stop()
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubelet", "kubeconfig")
	if err := pki.WriteFileAtomic(kubeconfig, data, 0o600); err != nil {
		n.Stop()
		return nil, err
	}
	n.StartedWith.Kubeconfig = kubeconfig
	if n.Kubelet, err = n.startKubelet(n.StartedWith); err != nil {
		n.Stop()
		return nil, err
	}
	return n, nil
}

// RestartKubelet stops the kubelet and starts it again as o says (with
// n.StartedWith: as StartNode ran it). The pods keep running in
// containerd, and the new kubelet takes them over: the same node name and
// root directory. The caller waits for what it needs (the Node Ready).
func (n *Node) RestartKubelet(o KubeletOptions) error {
	n.Kubelet.Stop(10 * time.Second)
	var err error
	n.Kubelet, err = n.startKubelet(o)
	return err
}

// startKubelet writes the kubelet's configuration for o and starts it.
func (n *Node) startKubelet(o KubeletOptions) (*Process, error) {
	name, address, certDir := o.LogName, o.Address, o.CertDir
	if name == "" {
		name = "kubelet"
	}
	if address == "" {
		address = "127.0.0.1"
	}
	if certDir == "" {
		certDir = filepath.Join(n.Dir, "kubelet-pki")
	}
	x509 := ""
	if o.ClientCAFile != "" {
		x509 = fmt.Sprintf("\n  x509: {clientCAFile: %q}", o.ClientCAFile)
	}
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
rotateCertificates: %t
serverTLSBootstrap: %t
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}%s
authorization: {mode: AlwaysAllow}
address: %s
port: %d
healthzBindAddress: 127.0.0.1
healthzPort: %d
readOnlyPort: 0
staticPodPath: ""
podLogsDir: %q
containerRuntimeEndpoint: unix://%s
evictionHard: {"memory.available": "1Mi", "nodefs.available": "1%%", "imagefs.available": "1%%", "nodefs.inodesFree": "1%%"}
`, o.RotateCertificates, o.ServerTLSBootstrap, x509, address, ports[0], ports[1], filepath.Join(n.Dir, "pod-logs"), n.sock)
	configFile := filepath.Join(n.Dir, "kubelet", name+"-config.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		return nil, err
	}
	args := []string{
		"--config", configFile,
		"--kubeconfig", o.Kubeconfig,
		"--root-dir", filepath.Join(n.Dir, "kubelet"),
		"--cert-dir", certDir,
		"--hostname-override", n.Name,
		"--v=2",
	}
	if o.BootstrapKubeconfig != "" {
		args = append(args, "--bootstrap-kubeconfig", o.BootstrapKubeconfig)
	}
	return Start(n.Dir, name, o.Binary, args...)
}

// sandboxImage is containerd's setting for the pause image, if one is given.
func sandboxImage(image string) string {
	if image == "" {
		return ""
	}
	return fmt.Sprintf("  sandbox_image = %q\n", image)
}

// Stop ends the kubelet, the agent and containerd, and removes what the
// kubelet left outside Dir.
func (n *Node) Stop() {
	for _, p := range []*Process{n.Kubelet, n.Agent, n.Containerd} {
		p.Stop(10 * time.Second)
	}
	unmountUnder(n.Dir)
	if !n.devicePluginsExisted {
		_ = os.RemoveAll("/var/lib/kubelet")
	}
	removeKubepodsCgroups()
	_ = exec.Command("ip", "link", "delete", "rekeye2e0").Run()
}

// unmountUnder lazily unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 1 && (fields[1] == dir || strings.HasPrefix(fields[1], dir+"/")) {
			points = append(points, fields[1])
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// removeKubepodsCgroups removes the kubelet's kubepods cgroups (empty once
// the kubelet and its pods are gone) in every hierarchy, deepest first.
func removeKubepodsCgroups() {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if _, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil {
		roots = append(roots, "/sys/fs/cgroup/kubepods")
	}
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			_ = syscall.Rmdir(d)
		}
	}
}

func waitUntil(timeout time.Duration, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if ok() {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("timed out after %s", timeout)
}
