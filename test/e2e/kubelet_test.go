package e2e

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"rekey.io/rekey/pkg/agent"
	"rekey.io/rekey/test/framework"
)

const kubeletNode = "e2e-kubelet"

// credentialIDs returns the certificate credential IDs kube-apiserver's
// audit log shows for the node's lease updates.
func credentialIDs(t *testing.T, node string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(kubeAuditLog)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		var ev auditv1.Event
		if json.Unmarshal([]byte(line), &ev) != nil || ev.ObjectRef == nil || ev.ObjectRef.Resource != "leases" || ev.ObjectRef.Name != node ||
			ev.User.Username != "system:node:"+node || ev.ResponseStatus == nil || ev.ResponseStatus.Code != 200 {
			continue
		}
		for _, id := range ev.User.Extra["authentication.kubernetes.io/credential-id"] {
			ids[id] = true
		}
	}
	return ids
}

func credentialID(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return "X509SHA256=" + hex.EncodeToString(sum[:])
}

// startKubelet starts a real kubelet for node name on rekey-agent's exec
// credential (agentArgs for `run`, execArgs for `exec-credential`), stops
// and cleans it up when the test ends, and waits for its Node to be Ready.
// kube-apiserver is made to trust the kubelet client CA first, by the
// framework's copy into --client-ca-file.
func startKubelet(t *testing.T, name string, agentArgs, execArgs []string) *framework.Node {
	t.Helper()
	skipUnlessRoot(t)
	trustKubeletClientCA(t)
	return startKubeletTrusted(t, name, agentArgs, execArgs)
}

func skipUnlessRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("a kubelet needs root (mounts, cgroups); run the e2e tests as root")
	}
}

// startKubeletTrusted is startKubelet for a test that keeps
// --client-ca-file itself (with rekey-agent trust-sync): it writes nothing
// there.
func startKubeletTrusted(t *testing.T, name string, agentArgs, execArgs []string) *framework.Node {
	t.Helper()
	skipUnlessRoot(t)
	tools, err := framework.BuildTools("kubelet")
	if err != nil {
		t.Fatal(err)
	}
	agentBin, err := framework.BinaryPath("rekey-agent")
	if err != nil {
		t.Fatal(err)
	}
	bootstrap, err := cluster.UserKubeconfig("system:bootstrap:"+strings.ReplaceAll(name, "-", ""), "system:bootstrappers")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "rekey-node-")
	if err != nil {
		t.Fatal(err)
	}
	node, err := framework.StartNode(dir, framework.NodeOptions{
		Name: name, Kubelet: filepath.Join(tools, "kubelet"), RekeyAgent: agentBin,
		BootstrapKubeconfig: bootstrap, AgentArgs: agentArgs, ExecArgs: execArgs,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubelet log tail:\n%s\nrekey-agent log tail:\n%s", node.Kubelet.LogTail(6000), node.Agent.LogTail(3000))
		}
		node.Stop()
		_ = os.RemoveAll(dir)
		_ = cluster.Admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	framework.Eventually(t, 2*time.Minute, "Node "+name+" Ready", func(ctx context.Context) error {
		n, err := cluster.Admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", n.Status.Conditions)
	})
	return node
}

// The kubelet follows the agent's renewals at their deadlines: ten-minute
// certificates renewed ten seconds after issue (--renew-before 590s, on
// both `run` and `exec-credential`, so client-go asks the plugin again by
// each deadline). Its lease is renewed with at least three certificates in
// turn, no CA rotation involved.
func TestKubeletFollowsDeadlineRenewals(t *testing.T) {
	const name = "e2e-kubelet-deadlines"
	node := startKubelet(t, name, []string{"--expiration-seconds", "600", "--renew-before", "590s", "--issuer-check-interval", "0"}, []string{"--renew-before", "590s"})
	store := &agent.Store{Dir: node.CertDir, Prefix: agent.PrefixClient}
	var ids map[string]bool
	framework.Eventually(t, 3*time.Minute, "lease updates with 3 distinct certificates", func(context.Context) error {
		if ids = credentialIDs(t, name); len(ids) < 3 {
			return fmt.Errorf("with %d", len(ids))
		}
		return nil
	})
	pair, err := store.Current()
	if err != nil {
		t.Fatal(err)
	}
	if life := pair.Leaf.NotAfter.Sub(pair.Leaf.NotBefore); life > 20*time.Minute {
		t.Errorf("certificate lifetime %s, want the ten minutes asked for (plus backdating)", life)
	}
	t.Logf("lease renewed with %d certificates in turn", len(ids))
}
