package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rekey.io/rekey/pkg/version"
	"rekey.io/rekey/test/framework"
)

// TestKubectlRekeyVersionThroughTheAggregator: behind kube-apiserver,
// /version is kube-apiserver's, so `kubectl rekey version` reads rekey's own
// from the Rekey-Version header of rekey's discovery document, which the
// aggregator's proxy passes on; a user with no rekey permission but
// discovery (system:authenticated) can read it.
func TestKubectlRekeyVersionThroughTheAggregator(t *testing.T) {
	plugin := framework.Binary(t, "kubectl-rekey")
	env := []string{"PATH=" + filepath.Dir(plugin) + string(os.PathListSeparator) + os.Getenv("PATH")}
	_, kubeconfig := userClient(t, "version-reader")
	out, errOut, err := framework.RunKubectlWithEnv(t, kubeconfig, env, nil, "rekey", "version")
	if err != nil {
		t.Fatalf("kubectl rekey version: %v\n%s%s", err, out, errOut)
	}
	if want := "Server Version: v" + version.Base; !strings.Contains(out, want) {
		t.Errorf("kubectl rekey version lacks %q (rekey's version, not kube-apiserver's):\n%s", want, out)
	}
	// kube-apiserver's own /version stays what it is.
	out, errOut, err = framework.RunKubectl(t, kubeconfig, nil, "version")
	if err != nil || strings.Contains(out, "Server Version: v"+version.Base) {
		t.Errorf("kubectl version through kube-apiserver: %v\n%s%s", err, out, errOut)
	}
}
