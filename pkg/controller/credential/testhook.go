package credential

import (
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
)

// testHook is for crash tests only: with REKEY_TEST_CREDENTIAL_PAUSE_DIR
// set, the controller writes "<dir>/step-<n>-<kind>" after each step that
// changed something and then stops working, so that the test can kill the
// server with SIGKILL exactly between two steps.
func testHook() func(StepKind) {
	dir := os.Getenv("REKEY_TEST_CREDENTIAL_PAUSE_DIR")
	if dir == "" {
		return nil
	}
	var n atomic.Int64
	return func(step StepKind) {
		i := n.Add(1)
		_ = os.WriteFile(filepath.Join(dir, "step-"+strconv.FormatInt(i, 10)+"-"+string(step)), nil, 0o600)
		select {}
	}
}
