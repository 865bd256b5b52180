//go:build rekeytest

package crashpoint

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"

	"k8s.io/klog/v2"
)

// Reached is called by the server at a point a crash test may stop it at:
// with REKEY_TEST_KILL_AT=<point> the process kills itself with SIGKILL;
// with REKEY_TEST_PAUSE_AT=<point> the caller waits until ctx ends.
func Reached(ctx context.Context, point string) {
	switch point {
	case os.Getenv("REKEY_TEST_KILL_AT"):
		klog.FromContext(ctx).Info("Test hook: killing the process", "step", point)
		kill()
	case os.Getenv("REKEY_TEST_PAUSE_AT"):
		klog.FromContext(ctx).Info("Test hook: pausing the rotation", "step", point)
		<-ctx.Done()
	}
}

// AgentReached is Reached for the agent, which has a variable of its own
// (REKEY_AGENT_TEST_KILL_AT) so that a test can kill the agent without
// killing a server started from the same environment.
func AgentReached(point string) {
	if point == os.Getenv("REKEY_AGENT_TEST_KILL_AT") {
		kill()
	}
}

// HoldAfterStep returns, when REKEY_TEST_CREDENTIAL_PAUSE_DIR is set, a
// function to call after each step that changed something: it writes
// "<dir>/step-<n>-<step>" and then never returns, so that the test can
// kill the process with SIGKILL exactly between two steps. It returns nil
// when the variable is not set.
func HoldAfterStep() func(step string) {
	dir := os.Getenv("REKEY_TEST_CREDENTIAL_PAUSE_DIR")
	if dir == "" {
		return nil
	}
	var n atomic.Int64
	return func(step string) {
		i := n.Add(1)
		_ = os.WriteFile(filepath.Join(dir, "step-"+strconv.FormatInt(i, 10)+"-"+step), nil, 0o600)
		select {}
	}
}

// kill ends the process at once, as a power cut or the OOM killer would:
// no deferred function, no shutdown hook.
func kill() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
