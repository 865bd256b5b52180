package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	apimachineryversion "k8s.io/apimachinery/pkg/version"

	"rekey.io/rekey/pkg/version"
	"rekey.io/rekey/test/framework"
)

// checkVersionsAndWhoAmI checks, on a running standalone server, what a
// person tries first (issue #32): `kubectl version` (the server's
// gitVersion is rekey's and parses as semver), `kubectl rekey version`,
// `kubectl auth whoami` and `kubectl auth can-i [--list]` for the admin and
// for a user whose kubeconfig `rekey-apiserver standalone user-kubeconfig` made.
// It runs inside TestKubectlAgainstStandaloneServer, on that test's server.
func checkVersionsAndWhoAmI(t *testing.T, srv *framework.Standalone) {
	t.Helper()
	out, errOut, err := framework.RunKubectl(t, srv.Kubeconfig, nil, "version", "-o", "json")
	if err != nil {
		t.Fatalf("kubectl version: %v\n%s%s", err, out, errOut)
	}
	var versions struct {
		ServerVersion *apimachineryversion.Info `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(out), &versions); err != nil || versions.ServerVersion == nil {
		t.Fatalf("kubectl version -o json: %v\n%s", err, out)
	}
	server := versions.ServerVersion
	if _, err := utilversion.ParseSemantic(server.GitVersion); err != nil || !strings.HasPrefix(server.GitVersion, "v"+version.Base) || strings.Contains(server.GitVersion+server.GitCommit, "$Format") {
		t.Errorf("server gitVersion %q commit %q: want v%s..., semver (%v)", server.GitVersion, server.GitCommit, version.Base, err)
	}

	plugin := framework.Binary(t, "kubectl-rekey")
	path := "PATH=" + filepath.Dir(plugin) + string(os.PathListSeparator) + os.Getenv("PATH")
	out, errOut, err = framework.RunKubectlWithEnv(t, srv.Kubeconfig, []string{path}, nil, "rekey", "version")
	if err != nil || !strings.Contains(out, "Client Version: v"+version.Base) || !strings.Contains(out, "Server Version: "+server.GitVersion+"\n") {
		t.Errorf("kubectl rekey version: %v, want the server's %s\n%s%s", err, server.GitVersion, out, errOut)
	}

	whoami := func(kubeconfig string) authenticationv1.UserInfo {
		t.Helper()
		out, errOut, err := framework.RunKubectl(t, kubeconfig, nil, "auth", "whoami", "-o", "json")
		var review authenticationv1.SelfSubjectReview
		if err == nil {
			err = json.Unmarshal([]byte(out), &review)
		}
		if err != nil {
			t.Fatalf("kubectl auth whoami: %v\n%s%s", err, out, errOut)
		}
		return review.Status.UserInfo
	}
	if admin := whoami(srv.Kubeconfig); admin.Username != "rekey-admin" || !slices.Contains(admin.Groups, "system:masters") {
		t.Errorf("the admin is %+v", admin)
	}

	// One command gives a user a kubeconfig.
	alice := filepath.Join(t.TempDir(), "alice.kubeconfig")
	cmd := exec.Command(framework.Binary(t, "rekey-apiserver"), "standalone", "user-kubeconfig", "--data-dir", srv.DataDir, "--user", "alice", "--group", "dev")
	cfg, err := cmd.Output()
	if err != nil {
		t.Fatalf("rekey-apiserver standalone user-kubeconfig: %v", err)
	}
	if err := os.WriteFile(alice, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	if u := whoami(alice); u.Username != "alice" || !slices.Contains(u.Groups, "dev") || slices.Contains(u.Groups, "system:masters") {
		t.Errorf("alice's kubeconfig authenticates as %+v", u)
	}

	out, errOut, err = framework.RunKubectl(t, alice, nil, "auth", "can-i", "--list")
	if err != nil || !strings.Contains(out, "certificatesigningrequests.certificates.rekey.io") || strings.Contains(out, "signers.certificates.rekey.io") {
		t.Errorf("alice: kubectl auth can-i --list: %v\n%s%s", err, out, errOut)
	}

	for _, tc := range []struct {
		kubeconfig, who string
		args            []string
		want            string
	}{
		{srv.Kubeconfig, "admin", []string{"approve", "signers.certificates.rekey.io"}, "yes"},
		{srv.Kubeconfig, "admin", []string{"get", "/metrics"}, "yes"},
		{alice, "alice", []string{"create", "certificatesigningrequests.certificates.rekey.io"}, "yes"},
		{alice, "alice", []string{"approve", "signers.certificates.rekey.io"}, "no"},
		{alice, "alice", []string{"delete", "certificatesigningrequests.certificates.rekey.io"}, "no"},
		{alice, "alice", []string{"get", "/metrics"}, "no"},
	} {
		out, errOut, err := framework.RunKubectl(t, tc.kubeconfig, nil, append([]string{"auth", "can-i"}, tc.args...)...)
		// can-i exits 0 for yes and 1 for no; a no carries the reason.
		if got := strings.TrimSpace(out); got != tc.want && !strings.HasPrefix(got, tc.want+" - ") || (err == nil) != (tc.want == "yes") {
			t.Errorf("%s: kubectl auth can-i %s = %q (%v), want %s\n%s", tc.who, strings.Join(tc.args, " "), got, err, tc.want, errOut)
		}
	}
}
