// Package framework runs real rekey-apiserver processes for integration and
// end-to-end tests.
package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/standalone"
)

// TestBuildTag is the build tag the framework compiles the binaries it
// runs with: it turns on the crash points of pkg/crashpoint, which the
// crash tests reach through REKEY_TEST_* variables. Release builds (make
// build, hack/build-images.sh) leave it out.
const TestBuildTag = "rekeytest"

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error

	releaseMu  sync.Mutex
	releaseDir string
	releaseBin = map[string]string{}
)

// RepoRoot is the module root, found from this file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Binary builds ./cmd/<name> once per test process, with TestBuildTag, and
// returns its path.
func Binary(t testing.TB, name string) string {
	t.Helper()
	path, err := BinaryPath(name)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// BinaryPath is Binary for callers without a testing.TB, such as TestMain.
func BinaryPath(name string) (string, error) {
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "rekey-bin-")
		if buildErr != nil {
			return
		}
		buildErr = goBuild(binDir+string(os.PathSeparator), "./cmd/...", "-tags", TestBuildTag)
	})
	if buildErr != nil {
		return "", buildErr
	}
	return filepath.Join(binDir, name), nil
}

// ReleaseBinaryPath builds ./cmd/<name> as a release is built, without
// TestBuildTag, once per test process, and returns its path: for tests of
// what the release binary does and does not contain.
func ReleaseBinaryPath(name string) (string, error) {
	releaseMu.Lock()
	defer releaseMu.Unlock()
	if path, ok := releaseBin[name]; ok {
		return path, nil
	}
	if releaseDir == "" {
		dir, err := os.MkdirTemp("", "rekey-release-bin-")
		if err != nil {
			return "", err
		}
		releaseDir = dir
	}
	path := filepath.Join(releaseDir, name)
	if err := goBuild(path, "./cmd/"+name); err != nil {
		return "", err
	}
	releaseBin[name] = path
	return path, nil
}

// goBuild runs go build -o out [flags] pkg in the module root.
func goBuild(out, pkg string, flags ...string) error {
	args := append(append([]string{"build", "-o", out}, flags...), pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = RepoRoot()
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, buf.String())
	}
	return nil
}

// RemoveBinaries deletes what BinaryPath and ReleaseBinaryPath built (about
// 270 MB per test process); TestMain and the bench call it when the process
// is done.
func RemoveBinaries() {
	for _, dir := range []string{binDir, releaseDir} {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	return ports[0]
}

// Standalone is a running `rekey-apiserver --standalone`.
type Standalone struct {
	*Process
	DataDir    string
	Port       int
	Kubeconfig string
	Config     *rest.Config
	Client     clientset.Interface
}

// StartStandalone runs rekey-apiserver --standalone with dataDir and waits
// until it is ready. The server is stopped when the test ends.
func StartStandalone(t testing.TB, dataDir string, extraArgs ...string) *Standalone {
	t.Helper()
	return StartStandaloneWithEnv(t, dataDir, nil, extraArgs...)
}

// StartStandaloneWithEnv is StartStandalone with extra environment
// variables for the server process (e.g. SOFTHSM2_CONF).
func StartStandaloneWithEnv(t testing.TB, dataDir string, env []string, extraArgs ...string) *Standalone {
	t.Helper()
	return StartStandaloneBinary(t, Binary(t, "rekey-apiserver"), dataDir, env, extraArgs...)
}

// StartStandaloneBinary is StartStandaloneWithEnv with the rekey-apiserver
// binary to run (e.g. one from ReleaseBinaryPath).
func StartStandaloneBinary(t testing.TB, binary, dataDir string, env []string, extraArgs ...string) *Standalone {
	t.Helper()
	var s *Standalone
	var err error
	for attempt := 0; ; attempt++ {
		s, err = LaunchStandalone(t.TempDir(), binary, dataDir, FreePort(t), env, extraArgs...)
		// A free port can be taken between choosing it and listening on it
		// (the embedded etcd's own listeners pick ports too): choose again.
		if err == nil || s == nil || attempt == 2 || !strings.Contains(s.LogTail(4000), "address already in use") {
			break
		}
		s.Stop(t)
	}
	if s != nil {
		t.Cleanup(func() {
			s.Stop(t)
			if t.Failed() {
				t.Logf("rekey-apiserver log (tail):\n%s", s.LogTail(20000))
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// LaunchStandalone runs binary --standalone with dataDir on port, its log
// in logDir, and waits until it is ready. On a readiness failure it returns
// the process too, so the caller can stop it and read its log.
func LaunchStandalone(logDir, binary, dataDir string, port int, env []string, extraArgs ...string) (*Standalone, error) {
	args := append([]string{"--standalone", "--data-dir", dataDir, "--secure-port", strconv.Itoa(port)}, extraArgs...)
	proc, err := StartWithEnv(logDir, "rekey-apiserver", binary, env, args...)
	if err != nil {
		return nil, err
	}
	s := &Standalone{Process: proc, DataDir: dataDir, Port: port, Kubeconfig: filepath.Join(dataDir, standalone.AdminKubeconfigFile)}
	err = waitFor(90*time.Second, func() error {
		if proc.Exited() {
			return errExited
		}
		cfg, err := s.restConfigIfWritten()
		if err != nil {
			return err
		}
		client, err := clientset.NewForConfig(cfg)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return err
		}
		if string(body) != "ok" {
			return fmt.Errorf("readyz: %s", body)
		}
		s.Config, s.Client = cfg, client
		return nil
	})
	if err != nil {
		return s, fmt.Errorf("rekey-apiserver not ready: %w\n%s", err, proc.LogTail(20000))
	}
	return s, nil
}

var errExited = errors.New("rekey-apiserver exited")

// restConfigIfWritten loads the admin kubeconfig once this server run has
// written it (its server URL names this run's port).
func (s *Standalone) restConfigIfWritten() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		return nil, err
	}
	if cfg.Host != fmt.Sprintf("https://127.0.0.1:%d", s.Port) {
		return nil, fmt.Errorf("kubeconfig is from another run (%s)", cfg.Host)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	return cfg, nil
}

// Stop sends SIGTERM and waits for the process to exit; a server that does
// not stop within 30s fails the test.
func (s *Standalone) Stop(t testing.TB) {
	if !s.Stopped(30 * time.Second) {
		t.Errorf("rekey-apiserver did not stop within 30s of SIGTERM")
	}
}

// ClientFor returns a client authenticated as user in groups, with a client
// certificate from the standalone client CA.
func (s *Standalone) ClientFor(t testing.TB, user string, groups ...string) (clientset.Interface, *rest.Config) {
	t.Helper()
	certPEM, keyPEM, err := standalone.PKI{Dir: filepath.Join(s.DataDir, "pki")}.IssueClientCertificate(user, groups)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(s.Config)
	cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.KeyData = certPEM, keyPEM
	cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile = "", ""
	client, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client, cfg
}
