// Package e2e runs rekey behind a real kube-apiserver (RBAC, Node
// authorization, the aggregation layer) and drives it with the real kubectl
// as distinct users authenticated by client certificates.
package e2e

import (
	"fmt"
	"os"
	"testing"

	"rekey.io/rekey/test/framework"
)

var cluster *framework.Cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "rekey-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rekey, err := framework.BinaryPath("rekey-apiserver")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cluster, err = framework.StartCluster(dir, rekey, framework.ClusterOptions{
		// Profiling on: /debug/pprof redirects in the generic server, so
		// TestRekeyNeverRedirects exercises the no-redirect filter.
		RekeyArgs: []string{"--profiling"},
		Logf:      func(format string, args ...any) { fmt.Fprintf(os.Stderr, "e2e: "+format+"\n", args...) },
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the control plane: %v\n", err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "rekey-apiserver log tail:\n%s\n", cluster.Rekey.LogTail(8000))
	}
	cluster.Stop()
	if code == 0 {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "logs kept in %s\n", dir)
	}
	return code
}
