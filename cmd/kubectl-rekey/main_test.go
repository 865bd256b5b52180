package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runAsPlugin makes this test binary kubectl-rekey itself when the
// completion script runs it (through the symlink the tests make), so that
// the script is tested against the real main without building it again.
const runAsPlugin = "KUBECTL_REKEY_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runAsPlugin) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// pluginDir is a directory holding kubectl-rekey (this test binary) and
// the shipped kubectl_complete-rekey, and a kubeconfig for a server that
// lists two rekey requests.
func pluginDir(t *testing.T) (dir, kubeconfig string) {
	t.Helper()
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/certificates.rekey.io/v1alpha1/certificatesigningrequests" {
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"CertificateSigningRequestList","apiVersion":"certificates.rekey.io/v1alpha1","metadata":{},"items":[
 {"metadata":{"name":"alice"},"spec":{"signerName":"example.com/team-signer","request":"","usages":["client auth"]}},
 {"metadata":{"name":"bob"},"spec":{"signerName":"example.com/team-signer","request":"","usages":["client auth"]},"status":{"conditions":[{"type":"Denied","status":"True"}]}}]}`)
	}))
	t.Cleanup(server.Close)
	dir = t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(dir, "kubectl-rekey")); err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("kubectl_complete-rekey")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubectl_complete-rekey"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	kubeconfig = filepath.Join(dir, "kubeconfig")
	config := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, server.URL)
	if err := os.WriteFile(kubeconfig, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, kubeconfig
}

func run(t *testing.T, dir, kubeconfig, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), runAsPlugin+"=1", "KUBECONFIG="+kubeconfig, "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, stderr.String())
	}
	return string(out)
}

// TestCompletionScript: kubectl_complete-rekey, as kubectl runs it, hands
// the words to kubectl-rekey's __complete: command names, and request
// names from the server.
func TestCompletionScript(t *testing.T) {
	dir, kubeconfig := pluginDir(t)
	script := filepath.Join(dir, "kubectl_complete-rekey")
	if out := run(t, dir, kubeconfig, script, "ap"); !strings.HasPrefix(out, "approve\t") || !strings.HasSuffix(out, ":4\n") {
		t.Errorf("kubectl_complete-rekey ap: %q", out)
	}
	if out := run(t, dir, kubeconfig, script, "approve", ""); out != "alice\tPending example.com/team-signer\n:4\n" {
		t.Errorf("kubectl_complete-rekey approve '': %q", out)
	}
}

// TestKubectlCompletesThePlugin: kubectl itself, where there is one
// recent enough, completes `kubectl rekey approve <TAB>` through the
// script.
func TestKubectlCompletesThePlugin(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("no kubectl on PATH")
	}
	dir, kubeconfig := pluginDir(t)
	out := run(t, dir, kubeconfig, kubectl, "__complete", "rekey", "approve", "")
	if !strings.Contains(out, "alice\t") || strings.Contains(out, "bob") {
		t.Errorf("kubectl __complete rekey approve '': %q", out)
	}
	if out := run(t, dir, kubeconfig, kubectl, "__complete", "rekey", "rotate", "st"); !strings.Contains(out, "start\t") {
		t.Errorf("kubectl __complete rekey rotate st: %q", out)
	}
}

// TestUnknownCommand: the error names kubectl rekey, and the exit code
// is non-zero.
func TestUnknownCommand(t *testing.T) {
	cmd := exec.Command(os.Args[0], "bogus")
	cmd.Env = append(os.Environ(), runAsPlugin+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil || string(out) != "error: unknown command \"bogus\" for \"kubectl rekey\"\n" {
		t.Fatalf("error %v, output %q", err, out)
	}
}
