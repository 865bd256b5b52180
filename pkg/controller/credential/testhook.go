package credential

import "rekey.io/rekey/pkg/crashpoint"

// testHook returns what the controller calls after each step that changed
// something, for crash tests only: in a build with the rekeytest tag and
// REKEY_TEST_CREDENTIAL_PAUSE_DIR set, it records the step and stops
// working, so that the test can kill the server with SIGKILL exactly
// between two steps (pkg/crashpoint). Otherwise it returns nil.
func testHook() func(StepKind) {
	hold := crashpoint.HoldAfterStep()
	if hold == nil {
		return nil
	}
	return func(step StepKind) { hold(string(step)) }
}
