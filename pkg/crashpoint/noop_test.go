//go:build !rekeytest

package crashpoint

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestReleaseBuildIgnoresTheVariables sets every variable to the point it
// then reaches: in a build without the rekeytest tag the process must
// neither die (the test binary would end with "signal: killed") nor stop.
func TestReleaseBuildIgnoresTheVariables(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("REKEY_TEST_KILL_AT", "kill-here")
	t.Setenv("REKEY_TEST_PAUSE_AT", "pause-here")
	t.Setenv("REKEY_AGENT_TEST_KILL_AT", "swap")
	t.Setenv("REKEY_TEST_CREDENTIAL_PAUSE_DIR", dir)

	done := make(chan struct{})
	go func() {
		defer close(done)
		// A context that never ends: a live pause would hold forever.
		ctx := context.Background()
		Reached(ctx, "kill-here")
		Reached(ctx, "pause-here")
		AgentReached("swap")
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a crash point held the caller in a build without the rekeytest tag")
	}

	if hold := HoldAfterStep(); hold != nil {
		t.Fatal("HoldAfterStep returned a hook in a build without the rekeytest tag")
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Fatalf("the pause directory: %v, %v", entries, err)
	}
}
