//go:build rekeytest

package crashpoint

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// helperEnv makes the test binary, run again by TestKill, reach the point
// named by its value instead of running tests.
const helperEnv = "CRASHPOINT_TEST_REACH"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "server":
		Reached(context.Background(), "here")
	case "agent":
		AgentReached("here")
	}
	os.Exit(0) // not killed
}

// TestKill runs the test binary again as a process that reaches "here",
// and checks that SIGKILL ends it exactly when the variable names that point.
func TestKill(t *testing.T) {
	for name, tc := range map[string]struct {
		caller, env string
		killed      bool
	}{
		"server at its point":    {caller: "server", env: "REKEY_TEST_KILL_AT=here", killed: true},
		"server at another":      {caller: "server", env: "REKEY_TEST_KILL_AT=elsewhere"},
		"server, agent variable": {caller: "server", env: "REKEY_AGENT_TEST_KILL_AT=here"},
		"agent at its point":     {caller: "agent", env: "REKEY_AGENT_TEST_KILL_AT=here", killed: true},
		"agent, server variable": {caller: "agent", env: "REKEY_TEST_KILL_AT=here"},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+tc.caller, tc.env)
			err := cmd.Run()
			var exit *exec.ExitError
			killed := errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
			if killed != tc.killed || (!killed && err != nil) {
				t.Fatalf("killed %v, want %v (%v)", killed, tc.killed, err)
			}
		})
	}
}

func TestPauseHoldsUntilTheContextEnds(t *testing.T) {
	t.Setenv("REKEY_TEST_PAUSE_AT", "here")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Reached(ctx, "here")
	}()
	Reached(context.Background(), "elsewhere") // returns at once
	select {
	case <-done:
		t.Fatal("Reached returned before its context ended")
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	<-done
}

func TestHoldAfterStepRecordsTheStep(t *testing.T) {
	if HoldAfterStep() != nil {
		t.Fatal("a hook without REKEY_TEST_CREDENTIAL_PAUSE_DIR")
	}
	dir := t.TempDir()
	t.Setenv("REKEY_TEST_CREDENTIAL_PAUSE_DIR", dir)
	hold := HoldAfterStep()
	if hold == nil {
		t.Fatal("no hook with REKEY_TEST_CREDENTIAL_PAUSE_DIR set")
	}
	// The hook never returns: it holds this goroutine until the test
	// binary exits.
	go hold("Mint")
	want := filepath.Join(dir, "step-1-Mint")
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(want)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("%s was not written: %v", want, err)
	}
}
