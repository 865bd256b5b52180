package framework

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

type recorder struct{ failed string }

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestEventuallyWaitsForTheCondition(t *testing.T) {
	var calls atomic.Int32
	r := &recorder{}
	Eventually(r, 10*time.Second, "third call", func(context.Context) error {
		if calls.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if r.failed != "" || calls.Load() != 3 {
		t.Fatalf("failed %q after %d calls", r.failed, calls.Load())
	}
}

func TestEventuallyReportsTheLastError(t *testing.T) {
	r := &recorder{}
	Eventually(r, 3*Interval, "never", func(context.Context) error { return errors.New("still broken") })
	if r.failed != "never: still not true after 300ms: still broken" {
		t.Fatalf("failure %q", r.failed)
	}
}

func TestStaysFailsAtTheFirstBreak(t *testing.T) {
	var calls atomic.Int32
	r := &recorder{}
	Stays(r, 10*time.Second, "holds", func(context.Context) error {
		if calls.Add(1) == 2 {
			return errors.New("broke")
		}
		return nil
	})
	if r.failed != "holds: broke" || calls.Load() != 2 {
		t.Fatalf("failed %q after %d calls", r.failed, calls.Load())
	}
}

func TestStaysHoldsThroughTheWindow(t *testing.T) {
	var calls atomic.Int32
	r := &recorder{}
	Stays(r, 5*Interval, "holds", func(context.Context) error { calls.Add(1); return nil })
	if r.failed != "" || calls.Load() < 3 {
		t.Fatalf("failed %q after %d calls", r.failed, calls.Load())
	}
}

func TestEventuallyStopsAtAPermanentError(t *testing.T) {
	exited := errors.New("exited")
	var calls atomic.Int32
	err := EventuallyErr(10*time.Second, func(context.Context) error {
		if calls.Add(1) < 2 {
			return errors.New("not yet")
		}
		return Permanent(fmt.Errorf("the process: %w", exited))
	})
	if !errors.Is(err, exited) || err.Error() != "the process: exited" || calls.Load() != 2 {
		t.Fatalf("error %v after %d calls", err, calls.Load())
	}
	var timeout *TimeoutError
	if errors.As(err, &timeout) {
		t.Fatalf("a permanent error reported as a timeout: %v", err)
	}
	r := &recorder{}
	Eventually(r, 10*time.Second, "alive", func(context.Context) error { return Permanent(exited) })
	if r.failed != "alive: exited" {
		t.Fatalf("failure %q", r.failed)
	}
	if Permanent(nil) != nil {
		t.Fatal("Permanent(nil) is not nil")
	}
}
