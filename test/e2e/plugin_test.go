package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rekey.io/rekey/test/framework"
)

func TestKubectlRekeyApproveAndDeny(t *testing.T) {
	plugin := framework.Binary(t, "kubectl-rekey")
	env := []string{"PATH=" + filepath.Dir(plugin) + string(os.PathListSeparator) + os.Getenv("PATH")}
	admin := cluster.RekeyAdmin
	for _, n := range []string{"plugin-approve", "plugin-deny", "plugin-nobody"} {
		create(t, admin, csrFor(t, n, "example.com/"+n))
	}

	_, kubeconfig := userClient(t, "plugin-approver")
	bind(t, "plugin-approver", "rekey:approver:example.com:all")
	framework.Eventually(t, settleTimeout, "kubectl rekey approve plugin-approve", func(ctx context.Context) error {
		_, stderr, err := framework.RunKubectlWithEnv(t, kubeconfig, env, nil, "rekey", "approve", "plugin-approve")
		if err != nil {
			return fmt.Errorf("%v: %s", err, stderr)
		}
		return nil
	})
	if !isApproved(t, "plugin-approve") {
		t.Fatal("kubectl rekey approve did not approve")
	}
	out, errOut, err := framework.RunKubectlWithEnv(t, kubeconfig, env, nil, "rekey", "approve", "plugin-approve")
	if err != nil || !strings.Contains(out, "approved (no change)") {
		t.Fatalf("second approve: %v %s%s", err, out, errOut)
	}
	out, errOut, err = framework.RunKubectlWithEnv(t, kubeconfig, env, nil, "rekey", "deny", "plugin-deny", "--reason=NotOurs", "--message=unknown host")
	if err != nil || !strings.Contains(out, "plugin-deny denied") {
		t.Fatalf("deny: %v %s%s", err, out, errOut)
	}
	_, errOut, err = framework.RunKubectlWithEnv(t, kubeconfig, env, nil, "rekey", "approve", "plugin-deny")
	if err == nil || !strings.Contains(errOut, "already denied") {
		t.Fatalf("approving a denied request: err=%v stderr=%s", err, errOut)
	}
	_, errOut, err = framework.RunKubectlWithEnv(t, kubeconfig, env, nil, "rekey", "deny", "plugin-approve")
	if err == nil || !strings.Contains(errOut, "already approved") {
		t.Fatalf("denying an approved request: err=%v stderr=%s", err, errOut)
	}

	// A user with the RBAC verbs on /approval but no approve on the signer.
	_, strangerConfig := userClient(t, "plugin-stranger")
	bind(t, "plugin-stranger", "rekey:approver:rekey.io:kube-apiserver-client")
	var lastErr string
	framework.Eventually(t, settleTimeout, "a refusal naming the approve verb", func(ctx context.Context) error {
		_, stderr, err := framework.RunKubectlWithEnv(t, strangerConfig, env, nil, "rekey", "approve", "plugin-nobody")
		lastErr = stderr
		if err == nil {
			t.Fatal("approved without permission")
		}
		if !strings.Contains(stderr, `"approve"`) {
			return errString(stderr)
		}
		return nil
	})
	for _, want := range []string{"cannot approve", "plugin-nobody", `"signers"`, "example.com/plugin-nobody"} {
		if !strings.Contains(lastErr, want) {
			t.Errorf("refusal does not say %q: %s", want, lastErr)
		}
	}
	if isApproved(t, "plugin-nobody") {
		t.Fatal("approved without permission")
	}
}

type errString string

func (e errString) Error() string { return string(e) }
