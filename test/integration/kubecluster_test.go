package integration

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"rekey.io/rekey/test/framework"
)

// The control plane of etcd, kube-apiserver with RBAC and rekey behind the
// aggregator is the slowest thing a test starts, so the tests that only
// need RBAC in front of rekey share one, started by the first of them to
// ask and stopped by TestMain. The tests run in parallel on it: each names
// what it creates (CAs, Signers, TrustConsumers, CSRs, ClusterRoles and
// their bindings, users) after itself, and counts or lists only what it
// created. A test that restarts, kills or reconfigures rekey must start a
// cluster of its own.
var (
	sharedClusterOnce sync.Once
	sharedCluster     *framework.Cluster
	sharedClusterDir  string
	sharedClusterErr  error
)

// kubeCluster returns the shared control plane, starting it on the first
// call; on failure the test logs the rekey-apiserver log tail, which holds
// every test's lines, not only its own.
func kubeCluster(t *testing.T) *framework.Cluster {
	t.Helper()
	sharedClusterOnce.Do(func() {
		rekey, err := framework.BinaryPath("rekey-apiserver")
		if err != nil {
			sharedClusterErr = err
			return
		}
		// Not t.TempDir: the cluster outlives the test that started it.
		if sharedClusterDir, err = os.MkdirTemp("", "rekey-it-cluster-"); err != nil {
			sharedClusterErr = err
			return
		}
		// Progress lines go to the starting test only while it waits here:
		// StartCluster does not keep Logf.
		sharedCluster, sharedClusterErr = framework.StartCluster(sharedClusterDir, rekey, framework.ClusterOptions{Logf: t.Logf})
	})
	if sharedClusterErr != nil {
		t.Fatalf("starting the shared control plane: %v", sharedClusterErr)
	}
	cluster := sharedCluster
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rekey-apiserver log tail (shared by the tests on this cluster):\n%s", cluster.Rekey.LogTail(8000))
		}
	})
	return cluster
}

// stopKubeCluster stops the shared control plane, if a test started it,
// and removes its directory; a no-op otherwise.
func stopKubeCluster() error {
	if sharedCluster != nil {
		sharedCluster.Stop()
	}
	if sharedClusterDir == "" {
		return nil
	}
	if err := os.RemoveAll(sharedClusterDir); err != nil {
		return fmt.Errorf("removing the shared control plane's directory: %w", err)
	}
	return nil
}
