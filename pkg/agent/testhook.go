package agent

import "rekey.io/rekey/pkg/crashpoint"

// StepSwap is the point between writing a new pair (and its temporary
// link) and making it current, where a crash test kills the agent.
const StepSwap = "swap"

// StepDiscard is the point after a revoked pair's current link is removed
// and before its files are, where a crash test kills the agent.
const StepDiscard = "discard"

// reached marks a point a crash test may kill the agent at; only a build
// with the rekeytest tag does (pkg/crashpoint).
func reached(step string) {
	crashpoint.AgentReached(step)
}
