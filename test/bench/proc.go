package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is USER_HZ, 100 on Linux.
const clockTicks = 100

// cpuSeconds returns a process's user+system CPU time.
func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	// Fields after the command name, which is in parentheses.
	fields := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / clockTicks
}

// rssMiB returns a process's resident set size.
func rssMiB(pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }() // read-only
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

// sampler tracks the peak summed RSS of some processes while it runs.
type sampler struct {
	pids []int
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	peak float64
}

func startSampler(pids []int) *sampler {
	s := &sampler{pids: pids, stop: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) sample() {
	var sum float64
	for _, p := range s.pids {
		sum += rssMiB(p)
	}
	s.mu.Lock()
	if sum > s.peak {
		s.peak = sum
	}
	s.mu.Unlock()
}

func (s *sampler) Stop() float64 {
	close(s.stop)
	s.wg.Wait()
	return s.peak
}
