package agent

import (
	"os"
	"syscall"
)

// StepSwap is the point between writing a new pair (and its temporary
// link) and making it current, where a crash test kills the agent.
const StepSwap = "swap"

// killAt is read once at start-up and is for tests only: an agent started
// with REKEY_AGENT_TEST_KILL_AT=<step> kills itself with SIGKILL there.
var killAt = os.Getenv("REKEY_AGENT_TEST_KILL_AT")

func reached(step string) {
	if killAt == step {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
