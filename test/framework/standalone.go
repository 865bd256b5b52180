// Package framework runs real rekey-apiserver processes for integration and
// end-to-end tests.
package framework

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/standalone"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// RepoRoot is the module root, found from this file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Binary builds ./cmd/<name> once per test process and returns its path.
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
		cmd := exec.Command("go", "build", "-o", binDir+string(os.PathSeparator), "./cmd/...")
		cmd.Dir = RepoRoot()
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/...: %v\n%s", err, out.String())
		}
	})
	if buildErr != nil {
		return "", buildErr
	}
	return filepath.Join(binDir, name), nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Standalone is a running `rekey-apiserver --standalone`.
type Standalone struct {
	DataDir    string
	Port       int
	Kubeconfig string
	Config     *rest.Config
	Client     clientset.Interface

	cmd  *exec.Cmd
	log  *os.File
	done chan error
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
	s := &Standalone{DataDir: dataDir, Port: FreePort(t)}
	logFile, err := os.CreateTemp("", "rekey-apiserver-*.log")
	if err != nil {
		t.Fatal(err)
	}
	s.log = logFile
	args := append([]string{"--standalone", "--data-dir", dataDir, "--secure-port", strconv.Itoa(s.Port)}, extraArgs...)
	s.cmd = exec.Command(Binary(t, "rekey-apiserver"), args...)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	s.cmd.Env = append(os.Environ(), env...)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting rekey-apiserver: %v", err)
	}
	s.done = make(chan error, 1)
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() {
		s.Stop(t)
		if t.Failed() {
			s.dumpLog(t)
		}
		os.Remove(logFile.Name())
	})
	s.Kubeconfig = filepath.Join(dataDir, standalone.AdminKubeconfigFile)
	s.waitReady(t)
	return s
}

func (s *Standalone) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case err := <-s.done:
			s.done <- err
			s.dumpLog(t)
			t.Fatalf("rekey-apiserver exited before becoming ready: %v", err)
		default:
		}
		if cfg, err := s.restConfigIfWritten(); err == nil {
			client, err := clientset.NewForConfig(cfg)
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
				cancel()
				if err == nil && string(body) == "ok" {
					s.Config, s.Client = cfg, client
					return
				}
				lastErr = err
			}
		} else {
			lastErr = err
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.dumpLog(t)
	t.Fatalf("rekey-apiserver not ready within 90s: %v", lastErr)
}

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

// Kill ends the server at once, as a crash would.
func (s *Standalone) Kill() {
	select {
	case err := <-s.done:
		s.done <- err
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	err := <-s.done
	s.done <- err
}

// Log returns the server's log so far.
func (s *Standalone) Log() string {
	data, _ := os.ReadFile(s.log.Name())
	return string(data)
}

// Stop sends SIGTERM and waits for the process to exit.
func (s *Standalone) Stop(t testing.TB) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case err := <-s.done:
		s.done <- err
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		err := <-s.done
		s.done <- err
		t.Errorf("rekey-apiserver did not stop within 30s of SIGTERM")
	}
}

func (s *Standalone) dumpLog(t testing.TB) {
	data, _ := os.ReadFile(s.log.Name())
	if len(data) > 20000 {
		data = data[len(data)-20000:]
	}
	t.Logf("rekey-apiserver log (tail):\n%s", data)
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
