package gcfloor

import (
	"context"
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

const mib = 1 << 20

func TestPercentFor(t *testing.T) {
	for _, tc := range []struct {
		name        string
		live, floor uint64
		base, want  int
	}{
		{"small live heap: the goal is the floor", 32 * mib, 256 * mib, 100, 700},
		{"goal exactly the floor", 128 * mib, 256 * mib, 100, 100},
		{"live heap over half the floor: GOGC's goal", 200 * mib, 256 * mib, 100, 100},
		{"another GOGC", 64 * mib, 256 * mib, 50, 300},
		{"GOGC's goal already over the floor", 100 * mib, 256 * mib, 200, 200},
		{"collector off stays off", 32 * mib, 256 * mib, -1, -1},
		{"nothing measured yet", 0, 256 * mib, 100, 100},
		{"no floor", 32 * mib, 0, 100, 100},
		{"tiny live heap, huge floor: capped", 1, math.MaxInt64, 100, math.MaxInt32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PercentFor(tc.live, tc.floor, tc.base); got != tc.want {
				t.Fatalf("PercentFor(%d, %d, %d) = %d, want %d", tc.live, tc.floor, tc.base, got, tc.want)
			}
			if p := PercentFor(tc.live, tc.floor, tc.base); p > 0 && tc.live > 0 && tc.floor > 0 && p < math.MaxInt32 {
				// The goal the percentage gives is within 1% of max(GOGC's, floor).
				goal := tc.live + tc.live*uint64(p)/100
				want := max(tc.live+tc.live*uint64(tc.base)/100, tc.floor)
				if goal+want/100 < want || goal > want+want/100 {
					t.Fatalf("goal %d, want about %d", goal, want)
				}
			}
		})
	}
}

func TestEffectiveFloor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		floor uint64
		limit int64
		want  uint64
	}{
		{"no memory limit", 256 * mib, math.MaxInt64, 256 * mib},
		{"limit well above", 256 * mib, 1024 * mib, 256 * mib},
		{"limit below twice the floor: half the limit", 256 * mib, 384 * mib, 192 * mib},
		{"unreadable limit", 256 * mib, 0, 256 * mib},
		{"no floor", 0, 384 * mib, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EffectiveFloor(tc.floor, tc.limit); got != tc.want {
				t.Fatalf("EffectiveFloor(%d, %d) = %d, want %d", tc.floor, tc.limit, got, tc.want)
			}
		})
	}
}

// fakeRuntime records what the tuner sets.
type fakeRuntime struct {
	live uint64
	set  []int
}

func (f *fakeRuntime) tuner(floor uint64, base int) *Tuner {
	return newTuner(floor, base, func() uint64 { return f.live }, func(p int) int { f.set = append(f.set, p); return 0 })
}

func TestTunerFollowsTheLiveHeap(t *testing.T) {
	f := &fakeRuntime{live: 32 * mib}
	tu := f.tuner(256*mib, 100)
	step := func(live uint64) {
		f.live = live
		if !tu.retune() {
			t.Fatal("retune reports the tuner stopped")
		}
	}
	step(32 * mib)
	step(32 * mib) // unchanged: not set again
	step(64 * mib)
	step(200 * mib) // past half the floor: back to GOGC's
	want := []int{700, 300, 100}
	if len(f.set) != len(want) {
		t.Fatalf("set %v, want %v", f.set, want)
	}
	for i := range want {
		if f.set[i] != want[i] {
			t.Fatalf("set %v, want %v", f.set, want)
		}
	}
}

func TestStopRestoresTheBase(t *testing.T) {
	f := &fakeRuntime{live: 32 * mib}
	tu := f.tuner(256*mib, 100)
	tu.retune()
	tu.Stop()
	tu.Stop()
	if len(f.set) != 2 || f.set[0] != 700 || f.set[1] != 100 {
		t.Fatalf("set %v, want [700 100]", f.set)
	}
	// A cleanup that runs after Stop changes nothing and does not rearm.
	if tu.retune() {
		t.Fatal("retune after Stop reports the tuner running")
	}
	if len(f.set) != 2 {
		t.Fatalf("set %v after Stop", f.set)
	}
}

func TestNoFloorNoTuning(t *testing.T) {
	tu := Start(0)
	defer tu.Stop()
	if tu.Floor() != 0 {
		t.Fatalf("floor %d, want 0", tu.Floor())
	}
	if got := readGCPercent(); got != 100 {
		t.Fatalf("GC percent %d, want 100", got)
	}
}

// TestStartRaisesThePercentageOfThisProcess runs the real tuner: a test
// binary's live heap is a few MiB, so a 64 MiB floor must raise the
// percentage right away and keep it raised across collections.
func TestStartRaisesThePercentageOfThisProcess(t *testing.T) {
	if readGCPercent() != 100 {
		t.Skip("GOGC is set for this test run")
	}
	tu := Start(64 * mib)
	t.Cleanup(func() {
		tu.Stop()
		if got := readGCPercent(); got != 100 {
			t.Errorf("after Stop: GC percent %d, want 100", got)
		}
	})
	if tu.Floor() != 64*mib {
		t.Fatalf("floor %d", tu.Floor())
	}
	// Before the process's first collection nothing is known; after one,
	// the cleanup sets the percentage (it runs on its own goroutine after
	// the cycle: wait for it, collecting meanwhile).
	if !collectUntil(t, func() bool { return readGCPercent() > 100 }) {
		t.Fatalf("GC percent %d after Start with a live heap of %d bytes, want over 100", readGCPercent(), readLive())
	}
	// The cleanup rearms after every cycle: the percentage follows the
	// live heap measured by the last one.
	keep := make([][]byte, 0, 16)
	for range 16 {
		keep = append(keep, make([]byte, mib))
	}
	for range 3 {
		runtime.GC()
	}
	want := PercentFor(readLive(), 64*mib, 100)
	if !collectUntil(t, func() bool { want = PercentFor(readLive(), 64*mib, 100); return readGCPercent() == want }) {
		t.Fatalf("GC percent %d, want %d for a live heap of %d", readGCPercent(), want, readLive())
	}
	runtime.KeepAlive(keep)
}

// collectUntil looks at done every 10ms for up to five seconds, running a
// collection after each look that fails, and reports whether done held.
func collectUntil(t *testing.T, done func() bool) bool {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		if done() {
			return true, nil
		}
		runtime.GC()
		return false, nil
	})
	return err == nil
}

func TestGCOffStaysOff(t *testing.T) {
	old := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(old)
	tu := Start(256 * mib)
	defer tu.Stop()
	if tu.Floor() != 0 {
		t.Fatalf("floor %d with the collector off, want 0", tu.Floor())
	}
	if got := readGCPercent(); got != -1 {
		t.Fatalf("GC percent %d, want -1 (off)", got)
	}
}
