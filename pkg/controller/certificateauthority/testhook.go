package certificateauthority

import (
	"context"

	"rekey.io/rekey/pkg/crashpoint"
)

// Rotation steps a test can stop the process at, to show that a rotation
// resumes from any of them.
const (
	StepPreparingStart        = "preparing-start"         // before the new key is made
	StepPreparingKeyMade      = "preparing-key-made"      // new key in its store, binding unchanged
	StepPreparingBound        = "preparing-bound"         // binding rotated, status not yet Prepared
	StepCompletingKeyDeleted  = "completing-key-deleted"  // old key destroyed, binding still lists it
	StepCompletingBindingDone = "completing-binding-done" // binding without the old key, status not yet Completed
)

// reached is called at each rotation step. Only a build with the rekeytest
// tag stops there (pkg/crashpoint: killed with REKEY_TEST_KILL_AT=<step>,
// paused until ctx ends with REKEY_TEST_PAUSE_AT=<step>).
func reached(ctx context.Context, step string) {
	crashpoint.Reached(ctx, step)
}
