//go:build !rekeytest

package crashpoint

import "context"

// Reached does nothing in a release build.
func Reached(context.Context, string) {}

// AgentReached does nothing in a release build.
func AgentReached(string) {}

// HoldAfterStep returns nil in a release build: there is nothing to hold.
func HoldAfterStep() func(step string) { return nil }
