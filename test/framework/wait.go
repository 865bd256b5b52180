package framework

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Interval is how often Eventually and Stays look.
const Interval = 100 * time.Millisecond

// TB is the part of testing.TB the helpers use (so that they can be tested
// with a recorder).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Eventually waits until cond returns nil, looking every Interval, and
// fails the test with cond's last error when timeout passes first. cond
// gets a context of its own, not the poll's: a request cut off by the
// timeout would otherwise read as a failed condition.
func Eventually(t TB, timeout time.Duration, what string, cond func(ctx context.Context) error) {
	t.Helper()
	if err := EventuallyErr(timeout, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// EventuallyErr is Eventually for code that is not a test: it returns
// the error instead of failing. A condition error marked with Permanent
// ends the wait at once and is returned unmarked.
func EventuallyErr(timeout time.Duration, cond func(ctx context.Context) error) error {
	last := context.DeadlineExceeded
	var stop *permanentError
	err := wait.PollUntilContextTimeout(context.Background(), Interval, timeout, true, func(context.Context) (bool, error) {
		last = cond(context.Background())
		if errors.As(last, &stop) {
			return false, stop
		}
		return last == nil, nil
	})
	switch {
	case stop != nil:
		return stop.err
	case err != nil:
		return &TimeoutError{After: timeout, Last: last}
	}
	return nil
}

// Permanent marks a condition's error as one that waiting will not cure
// (a process that exited will not become ready): Eventually fails with it,
// and EventuallyErr returns it, at once instead of at the timeout. A nil
// err stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Stays checks, every Interval for the whole window, that cond holds, and
// fails as soon as it does not: for what must not happen, once a witness
// has shown that whatever could make it happen is running.
func Stays(t TB, window time.Duration, what string, cond func(ctx context.Context) error) {
	t.Helper()
	var broken error
	_ = wait.PollUntilContextTimeout(context.Background(), Interval, window, true, func(context.Context) (bool, error) {
		broken = cond(context.Background())
		return broken != nil, nil
	})
	if broken != nil {
		t.Fatalf("%s: %v", what, broken)
	}
}

// TimeoutError is what Eventually reports: how long it waited and the
// condition's last answer.
type TimeoutError struct {
	After time.Duration
	Last  error
}

func (e *TimeoutError) Error() string {
	return "still not true after " + e.After.String() + ": " + e.Last.Error()
}

func (e *TimeoutError) Unwrap() error { return e.Last }
