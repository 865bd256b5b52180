package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rekey.io/rekey/pkg/agent"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/test/framework"
)

// TestKubeletHealsAfterItsCertificateIsRevoked: `kubectl rekey revoke
// --sha256` of the certificate a real kubelet uses (the one rekey-agent
// holds) makes kube-apiserver refuse it (403 through rekey's authorization
// webhook); rekey-agent notices within --revocation-check-interval,
// discards it and bootstraps a new certificate with a new key; the kubelet
// takes it from exec-credential (--recheck), its lease is renewed with the
// new certificate (kube-apiserver's audit log shows the new credential-id)
// and its Node is Ready.
func TestKubeletHealsAfterItsCertificateIsRevoked(t *testing.T) {
	const name = "e2e-kubelet-revoked"
	node := startKubelet(t, name, []string{"--revocation-check-interval", "2s", "--issuer-check-interval", "0"}, []string{"--recheck", "5s"})
	store := &agent.Store{Dir: node.CertDir, Prefix: agent.PrefixClient}
	revoked, err := store.Current()
	if err != nil {
		t.Fatal(err)
	}
	revokedID := credentialID(revoked.Leaf)
	revokedSHA := strings.TrimPrefix(revokedID, "X509SHA256=")
	revokedFile, err := os.Readlink(store.CurrentPath())
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, "the kubelet's lease renewed with the agent's certificate", func(context.Context) error {
		if !credentialIDs(t, name)[revokedID] {
			return fmt.Errorf("no lease update with %s yet", revokedID)
		}
		return nil
	})

	plugin := framework.Binary(t, "kubectl-rekey")
	env := []string{"PATH=" + filepath.Dir(plugin) + string(os.PathListSeparator) + os.Getenv("PATH")}
	out, errOut, err := framework.RunKubectlWithEnv(t, cluster.AdminKubeconfig, env, nil, "rekey", "revoke", "--sha256", revokedID, "--reason", "key-compromise")
	if want := "revocation.certificates.rekey.io/" + revokedSHA + " revoked (KeyCompromise)"; err != nil || !strings.Contains(out, want) {
		t.Fatalf("kubectl rekey revoke: %v\nout %q, want %q\nerr %s", err, out, want, errOut)
	}
	revokedAt := time.Now()

	// kube-apiserver refuses the certificate: a request made with it (as
	// the kubelet and the agent make theirs) is 403 with the revocation.
	certPEM, keyPEM, err := agent.EncodePair(revoked)
	if err != nil {
		t.Fatal(err)
	}
	withRevoked := kubernetes.NewForConfigOrDie(&rest.Config{Host: cluster.KubeAPIURL,
		TLSClientConfig: rest.TLSClientConfig{CAData: cluster.ServingCA.CertPEM(), CertData: certPEM, KeyData: keyPEM}})
	framework.Eventually(t, 10*time.Second, "kube-apiserver refusing the revoked certificate", func(ctx context.Context) error {
		_, err := withRevoked.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if err == nil || !strings.Contains(err.Error(), "was revoked") {
			return fmt.Errorf("a request with the revoked certificate: %v", err)
		}
		return nil
	})

	// rekey-agent bootstraps a new certificate, for a new key.
	var renewed string
	framework.Eventually(t, time.Minute, "rekey-agent holding a new certificate", func(context.Context) error {
		pair, err := store.Current()
		if err != nil {
			return err
		}
		if credentialID(pair.Leaf) == revokedID {
			return fmt.Errorf("still the revoked certificate")
		}
		if signing.PublicKeysEqual(pair.Leaf.PublicKey, revoked.Leaf.PublicKey) {
			return framework.Permanent(fmt.Errorf("the new certificate is for the revoked certificate's key"))
		}
		renewed = credentialID(pair.Leaf)
		return nil
	})
	if _, err := os.Stat(filepath.Join(node.CertDir, revokedFile)); !os.IsNotExist(err) {
		t.Errorf("the revoked pair %s is still on disk: %v", revokedFile, err)
	}
	if log := node.Agent.LogTail(20000); !strings.Contains(log, "The current certificate is revoked") || !strings.Contains(log, revokedSHA) {
		t.Errorf("the agent's log does not say it discarded the revoked certificate %s", revokedSHA)
	}

	// The kubelet uses it: its lease is renewed with the new certificate,
	// after the revocation, and the Node is Ready.
	framework.Eventually(t, 2*time.Minute, "the lease renewed with the new certificate", func(ctx context.Context) error {
		if !credentialIDs(t, name)[renewed] {
			return fmt.Errorf("no lease update with %s yet", renewed)
		}
		lease, err := cluster.Admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if renewedAt := leaseRenewTime(lease); !renewedAt.After(revokedAt) {
			return fmt.Errorf("lease last renewed at %s, before the revocation", renewedAt)
		}
		return nil
	})
	if n := revokedRequestsAfter(t, name, revokedID); n == 0 {
		t.Log("no request of the kubelet with the revoked certificate was refused (it switched before its next lease update)")
	} else {
		t.Logf("%d requests with the revoked certificate refused before the kubelet switched", n)
	}
	framework.Eventually(t, time.Minute, "Node "+name+" Ready", func(ctx context.Context) error {
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

	// Revoking again is success, and changes nothing.
	out, errOut, err = framework.RunKubectlWithEnv(t, cluster.AdminKubeconfig, env, nil, "rekey", "revoke", "--sha256", revokedSHA)
	if err != nil || !strings.Contains(out, revokedSHA+" already revoked (KeyCompromise") {
		t.Fatalf("revoking again: %v\nout %q\nerr %s", err, out, errOut)
	}
}

func leaseRenewTime(l *coordinationv1.Lease) time.Time {
	if l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

// revokedRequestsAfter counts the node's requests kube-apiserver refused
// (403) with the revoked certificate.
func revokedRequestsAfter(t *testing.T, node, id string) int {
	t.Helper()
	data, err := os.ReadFile(kubeAuditLog)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		var ev auditv1.Event
		if json.Unmarshal([]byte(line), &ev) != nil || ev.User.Username != "system:node:"+node || ev.ResponseStatus == nil || ev.ResponseStatus.Code != 403 {
			continue
		}
		for _, got := range ev.User.Extra["authentication.kubernetes.io/credential-id"] {
			if got == id {
				n++
			}
		}
	}
	return n
}
