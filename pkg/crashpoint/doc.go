// Package crashpoint lets crash tests stop a rekey process at a named point
// of its work (kill it there with SIGKILL, or hold it there), so that a
// test can show the work resumes correctly from any of them.
//
// The points are real only in binaries built with the rekeytest build tag,
// as the test framework builds them (go build -tags rekeytest). A release
// build compiles every function here to an empty no-op that never reads
// the environment, so no variable can make a deployed server or agent kill
// or stall itself.
//
// With the tag, the process's environment chooses the point:
//
//	REKEY_TEST_KILL_AT=<point>              Reached kills the process at <point>
//	REKEY_TEST_PAUSE_AT=<point>             Reached blocks at <point> until its context ends
//	REKEY_AGENT_TEST_KILL_AT=<point>        AgentReached kills the process at <point>
//	REKEY_TEST_CREDENTIAL_PAUSE_DIR=<dir>   HoldAfterStep records each step in <dir> and holds
package crashpoint
