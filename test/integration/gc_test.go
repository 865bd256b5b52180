package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"rekey.io/rekey/test/framework"
)

// gcPercent waits until the server reports a GC percentage for which ok
// holds (the tuner sets it after the server's next collection) and
// returns the last one it read.
func gcPercent(t *testing.T, srv *framework.Standalone, ok func(float64) bool) float64 {
	t.Helper()
	var got float64
	_ = framework.EventuallyErr(30*time.Second, func(ctx context.Context) error {
		var err error
		if got, err = readMetricValue(ctx, srv.Client, "go_gc_gogc_percent "); err != nil {
			return err
		}
		if !ok(got) {
			return fmt.Errorf("go_gc_gogc_percent %v", got)
		}
		return nil
	})
	return got
}

// afterACollection waits until the server has collected garbage since
// this call: a GC tuner retunes after every collection, so by then one
// would have acted (the sleep this replaces only hoped for a few).
func afterACollection(t *testing.T, srv *framework.Standalone) {
	t.Helper()
	const cycles = "go_gc_cycles_total_gc_cycles_total "
	before := metricValue(t, srv.Client, cycles)
	framework.Eventually(t, 30*time.Second, "a collection in the server", func(ctx context.Context) error {
		n, err := readMetricValue(ctx, srv.Client, cycles)
		if err != nil {
			return err
		}
		if n <= before {
			return fmt.Errorf("%v collections, as before", n)
		}
		return nil
	})
}

// TestGCHeapFloor: a fresh server's live heap is far below half a 256 MiB
// floor, so with --gc-heap-floor=256Mi its collector runs with a
// percentage over GOGC's 100 (what /metrics reports as
// go_gc_gogc_percent); by default (no floor) it stays at 100, and a
// GOMEMLIMIT below twice the floor lowers it. The default server runs
// beside the other two.
func TestGCHeapFloor(t *testing.T) {
	t.Parallel()
	t.Run("by default", func(t *testing.T) {
		t.Parallel()
		byDefault := framework.StartStandalone(t, t.TempDir())
		afterACollection(t, byDefault)
		if got := metricValue(t, byDefault.Client, "go_gc_gogc_percent "); got != 100 {
			t.Fatalf("go_gc_gogc_percent %v by default, want 100", got)
		}
	})
	t.Run("with a floor", func(t *testing.T) {
		t.Parallel()
		floored := gcPercent(t, framework.StartStandalone(t, t.TempDir(), "--gc-heap-floor=256Mi"), func(p float64) bool { return p > 100 })
		if floored <= 100 {
			t.Fatalf("go_gc_gogc_percent %v with --gc-heap-floor=256Mi, want over 100", floored)
		}

		// With GOMEMLIMIT=160MiB the floor is 80 MiB, not 256: the
		// percentage must be well below the first server's (the live heaps
		// are alike).
		limited := framework.StartStandaloneWithEnv(t, t.TempDir(), []string{"GOMEMLIMIT=160MiB"}, "--gc-heap-floor=256Mi")
		afterACollection(t, limited)
		got := metricValue(t, limited.Client, "go_gc_gogc_percent ")
		if got >= floored/2 {
			t.Fatalf("go_gc_gogc_percent %v with GOMEMLIMIT=160MiB, want well below the %v of a 256 MiB floor", got, floored)
		}
	})
}
