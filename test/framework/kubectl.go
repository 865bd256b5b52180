package framework

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var (
	kubectlOnce sync.Once
	kubectlPath string
	kubectlErr  error
)

// Kubectl returns the kubectl binary to test with: $KUBECTL, else the one on
// PATH, else one built by hack/build-tools.sh at the version rekey targets.
func Kubectl(t testing.TB) string {
	t.Helper()
	p, err := findKubectl()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func findKubectl() (string, error) {
	kubectlOnce.Do(func() {
		if p := os.Getenv("KUBECTL"); p != "" {
			kubectlPath = p
			return
		}
		if p, err := exec.LookPath("kubectl"); err == nil {
			kubectlPath = p
			return
		}
		dir, err := BuildTools("kubectl")
		if err != nil {
			kubectlErr = err
			return
		}
		kubectlPath = filepath.Join(dir, "kubectl")
	})
	return kubectlPath, kubectlErr
}

// BuildTools runs hack/build-tools.sh for the named tools and returns the
// directory holding them.
func BuildTools(tools ...string) (string, error) {
	cmd := exec.Command(filepath.Join(RepoRoot(), "hack", "build-tools.sh"), tools...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", &toolError{err: err, stderr: stderr.String()}
	}
	return strings.TrimSpace(stdout.String()), nil
}

type toolError struct {
	err    error
	stderr string
}

func (e *toolError) Error() string { return "hack/build-tools.sh: " + e.err.Error() + "\n" + e.stderr }

// RunKubectl runs kubectl with the kubeconfig and returns stdout, stderr and
// the error.
func RunKubectl(t testing.TB, kubeconfig string, stdin []byte, args ...string) (string, string, error) {
	t.Helper()
	return RunKubectlWithEnv(t, kubeconfig, nil, stdin, args...)
}

// RunKubectlWithEnv is RunKubectl with extra environment variables (such as
// a PATH that holds kubectl-rekey).
func RunKubectlWithEnv(t testing.TB, kubeconfig string, env []string, stdin []byte, args ...string) (string, string, error) {
	t.Helper()
	return runKubectl(Kubectl(t), kubeconfig, t.TempDir(), env, stdin, args...)
}

func runKubectl(kubectl, kubeconfig, cacheDir string, env []string, stdin []byte, args ...string) (string, string, error) {
	// Connection flags go last: kubectl refuses flags before a plugin name.
	// But before a "--", after which the arguments are a command's (kubectl
	// exec).
	conn := []string{"--kubeconfig", kubeconfig, "--cache-dir", cacheDir}
	if i := slices.Index(args, "--"); i >= 0 {
		args = slices.Concat(args[:i], conn, args[i:])
	} else {
		args = slices.Concat(args, conn)
	}
	cmd := exec.Command(kubectl, args...)
	cmd.Env = append(os.Environ(), env...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}
