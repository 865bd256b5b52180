package certificateauthority

import (
	"context"
	"os"
	"syscall"

	"k8s.io/klog/v2"
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

// These variables are read once at start-up and are for tests only: a
// process started with REKEY_TEST_KILL_AT=<step> kills itself with SIGKILL
// when it reaches the step; with REKEY_TEST_PAUSE_AT=<step> the controller
// stops there until the process ends.
var (
	killAt  = os.Getenv("REKEY_TEST_KILL_AT")
	pauseAt = os.Getenv("REKEY_TEST_PAUSE_AT")
)

// reached is called at each rotation step.
func reached(ctx context.Context, step string) {
	switch step {
	case killAt:
		klog.FromContext(ctx).Info("Test hook: killing the process", "step", step)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case pauseAt:
		klog.FromContext(ctx).Info("Test hook: pausing the rotation", "step", step)
		<-ctx.Done()
	}
}
