package integration

import (
	"testing"
	"time"

	"rekey.io/rekey/test/framework"
)

// gcPercent waits until the server reports a GC percentage for which ok
// holds (the tuner sets it after the server's next collection) and
// returns it.
func gcPercent(t *testing.T, srv *framework.Standalone, ok func(float64) bool) float64 {
	t.Helper()
	var got float64
	deadline := time.Now().Add(30 * time.Second)
	for {
		got = metricValue(t, srv.Client, "go_gc_gogc_percent ")
		if ok(got) || time.Now().After(deadline) {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestGCHeapFloor: a fresh server's live heap is far below half a 256 MiB
// floor, so with --gc-heap-floor=256Mi its collector runs with a
// percentage over GOGC's 100 (what /metrics reports as
// go_gc_gogc_percent); by default (no floor) it stays at 100, and a
// GOMEMLIMIT below twice the floor lowers it.
func TestGCHeapFloor(t *testing.T) {
	floored := gcPercent(t, framework.StartStandalone(t, t.TempDir(), "--gc-heap-floor=256Mi"), func(p float64) bool { return p > 100 })
	if floored <= 100 {
		t.Fatalf("go_gc_gogc_percent %v with --gc-heap-floor=256Mi, want over 100", floored)
	}

	byDefault := framework.StartStandalone(t, t.TempDir())
	// Give the server time for a few collections: a tuner would have acted.
	time.Sleep(2 * time.Second)
	if got := metricValue(t, byDefault.Client, "go_gc_gogc_percent "); got != 100 {
		t.Fatalf("go_gc_gogc_percent %v by default, want 100", got)
	}

	// With GOMEMLIMIT=160MiB the floor is 80 MiB, not 256: the percentage
	// must be well below the first server's (the live heaps are alike).
	limited := framework.StartStandaloneWithEnv(t, t.TempDir(), []string{"GOMEMLIMIT=160MiB"}, "--gc-heap-floor=256Mi")
	time.Sleep(2 * time.Second)
	got := metricValue(t, limited.Client, "go_gc_gogc_percent ")
	if got >= floored/2 {
		t.Fatalf("go_gc_gogc_percent %v with GOMEMLIMIT=160MiB, want well below the %v of a 256 MiB floor", got, floored)
	}
}
