// Package gcfloor keeps the Go garbage collector's heap goal at or above a
// floor.
//
// The collector starts a cycle when the heap reaches the goal, by default
// twice what the last cycle found live (GOGC=100). rekey-apiserver's live
// heap is small until it stores many requests (tens of MiB), while every
// write allocates a few hundred KiB in the generic API server code: at a
// few hundred writes a second that is several collections a second. A
// floor on the goal spends memory on fewer collections, as a higher GOGC
// does, but only while the live heap is under half the floor: past that
// the goal is GOGC's again. Whether the memory is worth it is the
// operator's call (rekey-apiserver's --gc-heap-floor, off by default).
package gcfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Tuner resets the GC percentage after every collection so that the next
// goal is max(live × (1 + base/100), floor).
type Tuner struct {
	floor uint64
	base  int

	// readLive and setPercent are the runtime's, replaced in tests.
	readLive   func() uint64
	setPercent func(int) int

	mu      sync.Mutex
	current int
	stopped bool
}

// PercentFor is the GC percentage that puts the next goal at
// max(live × (1 + base/100), floor): base once that is at least the floor,
// more while the live heap is smaller.
func PercentFor(live, floor uint64, base int) int {
	if base < 0 || live == 0 {
		return base
	}
	if live+live*uint64(base)/100 >= floor {
		return base
	}
	p := (floor - live) * 100 / live
	if p > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(p)
}

// EffectiveFloor is floor, lowered to half a memory limit below twice it:
// the limit (GOMEMLIMIT) stays what bounds the heap as it nears it, and
// the floor never makes the collector run against the limit.
func EffectiveFloor(floor uint64, memoryLimit int64) uint64 {
	if memoryLimit > 0 && memoryLimit < math.MaxInt64 && floor > uint64(memoryLimit)/2 {
		return uint64(memoryLimit) / 2
	}
	return floor
}

// Start tunes the collector with the given floor in bytes over the
// percentage GOGC sets. It does nothing with a zero floor or with the
// collector off (GOGC=off). Stop ends it.
func Start(floor uint64) *Tuner {
	t := newTuner(EffectiveFloor(floor, readInt64("/gc/gomemlimit:bytes")), readGCPercent(), readLive, debug.SetGCPercent)
	if t.floor > 0 && t.base >= 0 {
		t.afterGC()
	}
	return t
}

func newTuner(floor uint64, base int, live func() uint64, set func(int) int) *Tuner {
	return &Tuner{floor: floor, base: base, current: base, readLive: live, setPercent: set}
}

// Floor is the floor in bytes the tuner keeps (0: it does nothing).
func (t *Tuner) Floor() uint64 {
	if t.base < 0 {
		return 0
	}
	return t.floor
}

// afterGC retunes and waits for the next cycle.
func (t *Tuner) afterGC() {
	if t.retune() {
		arm(t)
	}
}

// retune sets the percentage for what the last cycle found live (only
// when it changes); false once the tuner is stopped.
func (t *Tuner) retune() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	if p := PercentFor(t.readLive(), t.floor, t.base); p != t.current {
		t.setPercent(p)
		t.current = p
	}
	return true
}

// sentinel is garbage as soon as it is made; its cleanup runs after the
// cycle that finds it so. It holds a pointer so that it is never
// allocated in a tiny-object block, which would keep it alive with its
// neighbours.
type sentinel struct {
	_ *int
}

func arm(t *Tuner) {
	runtime.AddCleanup(&sentinel{}, (*Tuner).afterGC, t)
}

// Stop restores the base percentage; the pending cleanup finds the tuner
// stopped and does not rearm.
func (t *Tuner) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	if t.current != t.base {
		t.setPercent(t.base)
		t.current = t.base
	}
}

func readLive() uint64 {
	return readUint64("/gc/heap/live:bytes")
}

// readGCPercent is GOGC's percentage, -1 for off (which the metric
// reports as the uint64 of -1).
func readGCPercent() int {
	v := readUint64("/gc/gogc:percent")
	if v > math.MaxInt32 {
		return -1
	}
	return int(v)
}

// readInt64 is a runtime metric capped at math.MaxInt64 (the memory
// limit's "none").
func readInt64(name string) int64 {
	return int64(min(readUint64(name), math.MaxInt64))
}

// readUint64 is a runtime metric, 0 if this runtime does not have it.
func readUint64(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
