package framework

import (
	"bytes"
	"os/exec"
	"sync"
	"testing"
)

// StartAgent runs `rekey-agent ARGS...` for the rest of the test: it is
// killed when the test ends, and its output is logged if the test failed.
// The returned command lets a test signal it (SIGSTOP, SIGKILL).
func StartAgent(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	bin, err := BinaryPath("rekey-agent")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("rekey-agent output:\n%s", out.String())
		}
	})
	return cmd
}

// lockedBuffer is an output buffer safe for the process's two streams.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
