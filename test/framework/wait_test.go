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
