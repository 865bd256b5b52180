package framework

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubeCluster is a whole one-node Kubernetes on this host, all v1.37.1
// from the tools module: etcd, kube-apiserver (RBAC, Node authorization,
// admission with Pod Security, the aggregation layer),
// kube-controller-manager, kube-scheduler, and a kubelet on containerd
// with images imported from tarballs. Pods reach kube-apiserver at the
// kubernetes Service's ClusterIP through a DNAT rule, as kube-proxy would
// arrange. rekey is not running: tests install it as an operator does.
type KubeCluster struct {
	*Cluster
	HostIP         string
	KCM, Scheduler *Process
	Node           *Node
	dnat           []string
}

// KubeClusterOptions say what the node starts with.
type KubeClusterOptions struct {
	// Images are image tarballs imported into the node's containerd; the
	// first is also its sandbox (pause) image, SandboxImage.
	Images       []string
	SandboxImage string
	Logf         func(format string, args ...any)
}

// KubeNodeName is the node's name.
const KubeNodeName = "install-node"

// StartKubeCluster starts the cluster in dir and waits for its node to be
// Ready. Call Stop when done.
func StartKubeCluster(dir string, o KubeClusterOptions) (*KubeCluster, error) {
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	tools, err := BuildTools("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet")
	if err != nil {
		return nil, err
	}
	hostIP, err := HostIP()
	if err != nil {
		return nil, err
	}
	c, err := StartCluster(dir, "", ClusterOptions{HostIP: hostIP, Logf: logf})
	if err != nil {
		return nil, err
	}
	k := &KubeCluster{Cluster: c, HostIP: hostIP}
	if err := k.start(tools, o, logf); err != nil {
		k.Stop()
		return nil, err
	}
	return k, nil
}

func (k *KubeCluster) start(tools string, o KubeClusterOptions, logf func(string, ...any)) error {
	p := func(name string) string { return filepath.Join(k.Dir, "pki", name) }
	kubePort := k.KubeAPIURL[strings.LastIndex(k.KubeAPIURL, ":")+1:]
	k.dnat = []string{"-d", KubernetesServiceIP + "/32", "-p", "tcp", "--dport", "443",
		"-j", "DNAT", "--to-destination", k.HostIP + ":" + kubePort, "-m", "comment", "--comment", "rekey-install-e2e"}
	if out, err := iptables("-I", k.dnat...); err != nil {
		k.dnat = nil
		return fmt.Errorf("adding the kubernetes Service's DNAT rule: %v: %s", err, out)
	}

	ports, err := FreePorts(2)
	if err != nil {
		return err
	}
	kcm, err := k.UserKubeconfig("system:kube-controller-manager")
	if err != nil {
		return err
	}
	logf("starting kube-controller-manager")
	if k.KCM, err = Start(k.Dir, "kube-controller-manager", filepath.Join(tools, "kube-controller-manager"),
		"--kubeconfig="+kcm, "--authentication-kubeconfig="+kcm, "--authorization-kubeconfig="+kcm,
		// Each controller with its own ServiceAccount, as kubeadm runs it.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+p("sa.key"),
		"--root-ca-file="+p("serving-ca.crt"),
		// The kubelet has its own certificate; no cluster signing CA here.
		// Nor approval: rekey's NodeClient approves the kubelet's CSRs in
		// TestHostClusterKubelet (docs/host-cluster.md, step 1).
		"--controllers=*,-csrsigning,-csrapproving",
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[0]),
	); err != nil {
		return err
	}
	sched, err := k.UserKubeconfig("system:kube-scheduler")
	if err != nil {
		return err
	}
	logf("starting kube-scheduler")
	if k.Scheduler, err = Start(k.Dir, "kube-scheduler", filepath.Join(tools, "kube-scheduler"),
		"--kubeconfig="+sched, "--authentication-kubeconfig="+sched, "--authorization-kubeconfig="+sched,
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[1]),
	); err != nil {
		return err
	}
	kubelet, err := k.UserKubeconfig("system:node:"+KubeNodeName, "system:nodes")
	if err != nil {
		return err
	}
	logf("starting the node (containerd, kubelet)")
	if k.Node, err = StartNode(filepath.Join(k.Dir, "node"), NodeOptions{
		Name: KubeNodeName, Kubelet: filepath.Join(tools, "kubelet"), Kubeconfig: kubelet,
		SandboxImage: o.SandboxImage, Images: o.Images,
	}); err != nil {
		return err
	}
	if err := k.WaitNodeReady(120*time.Second, time.Time{}); err != nil {
		return err
	}
	return k.waitControllers(2 * time.Minute)
}

// waitControllers waits until kube-controller-manager's controllers act,
// each with its own ServiceAccount's credentials: the root CA publisher's
// ConfigMap in default (without which no pod's token volume mounts) and the
// default ServiceAccount. A test's first pod otherwise races the
// controllers' start (its claim unbound, its volumes unmountable).
func (k *KubeCluster) waitControllers(timeout time.Duration) error {
	err := waitFor(timeout, func() error {
		if k.KCM.Exited() {
			return fmt.Errorf("kube-controller-manager exited (%w)", errExited)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := k.Admin.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
			return fmt.Errorf("the root CA publisher: %w", err)
		}
		if _, err := k.Admin.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return fmt.Errorf("the service account controller: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("kube-controller-manager's controllers: %w\n%s", err, k.KCM.LogTail(3000))
	}
	return nil
}

// WaitNodeReady waits until the node is Ready, by a heartbeat of its
// kubelet at since or later (a kubelet started then: the condition a
// stopped one left says nothing), failing at once when a process of the
// node or the controllers exits.
func (k *KubeCluster) WaitNodeReady(timeout time.Duration, since time.Time) error {
	// Heartbeats are stamped in whole seconds.
	since = since.Truncate(time.Second)
	return waitFor(timeout, func() error {
		for name, p := range map[string]*Process{"kube-controller-manager": k.KCM, "kube-scheduler": k.Scheduler, "kubelet": k.Node.Kubelet, "containerd": k.Node.Containerd} {
			if p.Exited() {
				return fmt.Errorf("%s exited (%w):\n%s", name, errExited, p.LogTail(3000))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		node, err := k.Admin.CoreV1().Nodes().Get(ctx, KubeNodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(since) {
				return nil
			}
		}
		return fmt.Errorf("node %s not Ready with a heartbeat since %s: %+v", KubeNodeName, since.Format(time.RFC3339), node.Status.Conditions)
	})
}

// Stop ends the node, the control plane and removes the DNAT rule.
func (k *KubeCluster) Stop() {
	if k.Node != nil {
		k.Node.Stop()
	}
	k.Scheduler.Stop(10 * time.Second)
	k.KCM.Stop(10 * time.Second)
	if k.dnat != nil {
		_, _ = iptables("-D", k.dnat...)
	}
	k.Cluster.Stop()
}

// Kubectl runs kubectl as the cluster's admin.
func (k *KubeCluster) Kubectl(stdin []byte, args ...string) (string, error) {
	return k.kubectl(stdin, args...)
}

// PodLogs returns what the node kept of the containers' logs whose pod
// name starts with prefix (for a failing test's message).
func (k *KubeCluster) PodLogs(prefix string) string {
	var b bytes.Buffer
	dirs, _ := filepath.Glob(filepath.Join(k.Node.Dir, "pod-logs", "*_"+prefix+"*", "*", "*.log"))
	for _, f := range dirs {
		data, _ := os.ReadFile(f)
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		fmt.Fprintf(&b, "==> %s\n%s\n", f, data)
	}
	return b.String()
}

// Diagnose returns what explains a pod of namespace that does not come
// up when its own description does not: the claims and volumes (a claim
// left unbound keeps it unscheduled), the namespace's events in order
// (mount and sandbox failures), the node's conditions and which of the
// node's and controllers' processes exited, and the ends of the kubelet's
// and containerd's logs.
func (k *KubeCluster) Diagnose(namespace string) string {
	var b bytes.Buffer
	for _, args := range [][]string{
		{"get", "pvc,pv", "-A", "-o", "wide"},
		{"get", "events", "-n", namespace, "--sort-by=.lastTimestamp"},
		{"get", "node", KubeNodeName, "-o", `jsonpath={range .status.conditions[*]}{.type}={.status} {.reason} {.lastHeartbeatTime}{"\n"}{end}`},
	} {
		out, err := k.kubectl(nil, args...)
		fmt.Fprintf(&b, "$ kubectl %s (%v)\n%s\n", strings.Join(args, " "), err, out)
	}
	procs := map[string]*Process{"kube-controller-manager": k.KCM, "kube-scheduler": k.Scheduler}
	if k.Node != nil {
		procs["kubelet"], procs["containerd"] = k.Node.Kubelet, k.Node.Containerd
	}
	for _, name := range []string{"kube-controller-manager", "kube-scheduler", "containerd", "kubelet"} {
		p := procs[name]
		if p == nil {
			continue
		}
		if p.Exited() {
			fmt.Fprintf(&b, "%s exited\n", name)
		}
		if name == "kubelet" || name == "containerd" {
			fmt.Fprintf(&b, "==> the end of %s's log\n%s\n", name, p.LogTail(6000))
		}
	}
	return b.String()
}

// iptables adds (-I) or deletes (-D) a rule of the nat table's PREROUTING
// chain, where traffic from pods on the node's bridge arrives.
func iptables(op string, rule ...string) ([]byte, error) {
	return exec.Command("iptables", append([]string{"-t", "nat", op, "PREROUTING"}, rule...)...).CombinedOutput()
}

// HostIP is the host's address on its default route: what pods on the
// node's bridge reach the host at.
func HostIP() (string, error) {
	// A UDP "connection" sends nothing; it only picks the source address.
	conn, err := net.Dial("udp4", "198.51.100.1:9")
	if err != nil {
		return "", fmt.Errorf("finding the host's address: %w", err)
	}
	defer func() { _ = conn.Close() }()
	ip := conn.LocalAddr().(*net.UDPAddr).IP
	if ip.IsLoopback() {
		return "", fmt.Errorf("the host's address is loopback (%s): pods could not reach it", ip)
	}
	return ip.String(), nil
}
