package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// target is one API that issues certificates: rekey's certificates.rekey.io
// or Kubernetes' certificates.k8s.io.
type target interface {
	// Create posts a request; Approve adds Approved through /approval.
	// Each says whether its response already holds the certificate (rekey
	// signs in the approval write, and at create for NodeClient signers);
	// otherwise the certificate arrives on the watch.
	Create(ctx context.Context, name string, request []byte) (issued bool, err error)
	Approve(ctx context.Context, name string) (issued bool, err error)
	// Watch reports the names of requests that have a certificate (or
	// failed) from now on.
	Watch(ctx context.Context, done func(name string, failed bool)) error
}

// result is one scenario's outcome.
type result struct {
	Name       string
	Issued     int
	Errors     int
	Elapsed    time.Duration
	Throughput float64
	P50        time.Duration
	P95        time.Duration
	P99        time.Duration
	CPUPer1000 float64   // server CPU seconds per 1,000 issuances
	PeakRSSMiB float64   // peak server RSS during the run
	Rounds     []float64 // throughput of each round
	// Requested is how many requests were made (the burst).
	Requested int
	// CPUByProcess is CPU seconds spent by each server process.
	CPUByProcess map[string]float64
}

// memoryResult compares what rekey-apiserver and kube-apiserver keep for the
// same number of stored, issued requests.
type memoryResult struct {
	Stored int
	// Growth is rekey-apiserver's, then kube-apiserver's.
	Growth [2]memory
}

// scenario is one API under load, measured over its rounds.
type scenario struct {
	name, prefix string
	tgt          target
	requests     [][]byte
	// cpuProcs are the processes whose CPU counts, by name.
	cpuProcs []namedProc
	rssPids  []int

	issued, errs int
	lat          []time.Duration
	elapsed      time.Duration
	peakRSS      float64
	cpuByProcess map[string]float64
	rounds       []float64
}

// namedProc is a server process, as the report names it.
type namedProc struct {
	name string
	pid  int
}

func cpuOf(procs []namedProc) map[string]float64 {
	out := make(map[string]float64, len(procs))
	for _, p := range procs {
		out[p.name] = cpuSeconds(p.pid)
	}
	return out
}

// runRound issues the round's share of the scenario's requests.
func (s *scenario) runRound(ctx context.Context, round, rounds, requesters, approvers int) {
	lo, hi := round*len(s.requests)/rounds, (round+1)*len(s.requests)/rounds
	cpu0 := cpuOf(s.cpuProcs)
	smp := startSampler(s.rssPids)
	issued, errs, lat, elapsed := drive(ctx, s.tgt, s.requests[lo:hi], fmt.Sprintf("%s-r%d", s.prefix, round), requesters, approvers, 60*time.Second)
	s.peakRSS = max(s.peakRSS, smp.Stop())
	if s.cpuByProcess == nil {
		s.cpuByProcess = map[string]float64{}
	}
	for name, v := range cpuOf(s.cpuProcs) {
		s.cpuByProcess[name] += v - cpu0[name]
	}
	s.issued += issued
	s.errs += errs
	s.lat = append(s.lat, lat...)
	s.elapsed += elapsed
	tput := float64(issued) / elapsed.Seconds()
	s.rounds = append(s.rounds, tput)
	fmt.Fprintf(os.Stderr, "  %d issued, %d errors, %.0f/s\n", issued, errs, tput)
}

func (s *scenario) result() result {
	r := summarize(s.name, s.issued, s.errs, s.lat, s.elapsed)
	if s.issued > 0 {
		var cpu float64
		for _, v := range s.cpuByProcess {
			cpu += v
		}
		r.CPUPer1000 = cpu / float64(s.issued) * 1000
	}
	r.PeakRSSMiB, r.Rounds, r.CPUByProcess = s.peakRSS, s.rounds, s.cpuByProcess
	return r
}

// drive runs n issuances with the given number of concurrent requesters: each
// creates a request and hands it to the approvers, then waits for its
// certificate: in the approval's response (rekey) or on the shared watch
// (certificates.k8s.io, whose signer writes it later). Latency is create
// to certificate seen by the client.
func drive(ctx context.Context, tgt target, requests [][]byte, prefix string, requesters, approvers int, timeout time.Duration) (issued int, errs int, latencies []time.Duration, elapsed time.Duration) {
	n := len(requests)
	var waiters sync.Map // name -> chan bool (failed)
	watchCtx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	watchReady := make(chan error, 1)
	go func() {
		watchReady <- tgt.Watch(watchCtx, func(name string, failed bool) {
			if ch, ok := waiters.LoadAndDelete(name); ok {
				ch.(chan bool) <- failed
			}
		})
	}()
	select {
	case err := <-watchReady:
		if err != nil {
			fmt.Printf("watch: %v\n", err)
			return 0, n, nil, 0
		}
	case <-time.After(500 * time.Millisecond):
	}

	approve := make(chan string, n)
	var errCount atomic.Int64
	var wgA sync.WaitGroup
	for i := 0; i < approvers; i++ {
		wgA.Add(1)
		go func() {
			defer wgA.Done()
			for name := range approve {
				var err error
				var issued bool
				for attempt := 0; attempt < 5; attempt++ {
					if issued, err = tgt.Approve(ctx, name); err == nil {
						break
					}
				}
				if err != nil {
					errCount.Add(1)
				}
				if err != nil || issued {
					if ch, ok := waiters.LoadAndDelete(name); ok {
						ch.(chan bool) <- err != nil
					}
				}
			}
		}()
	}

	work := make(chan int, n)
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	lat := make([]time.Duration, n)
	ok := make([]bool, n)
	start := time.Now()
	var wgR sync.WaitGroup
	for r := 0; r < requesters; r++ {
		wgR.Add(1)
		go func() {
			defer wgR.Done()
			for i := range work {
				name := fmt.Sprintf("%s-%06d", prefix, i)
				ch := make(chan bool, 1)
				waiters.Store(name, ch)
				t0 := time.Now()
				issuedAtCreate, err := tgt.Create(ctx, name, requests[i])
				if err != nil {
					waiters.Delete(name)
					errCount.Add(1)
					continue
				}
				if issuedAtCreate {
					if ch, ok := waiters.LoadAndDelete(name); ok {
						ch.(chan bool) <- false
					}
				} else {
					approve <- name
				}
				select {
				case failed := <-ch:
					if !failed {
						lat[i], ok[i] = time.Since(t0), true
					}
				case <-time.After(timeout):
					waiters.Delete(name)
					errCount.Add(1)
				}
			}
		}()
	}
	wgR.Wait()
	elapsed = time.Since(start)
	close(approve)
	wgA.Wait()
	for i := range lat {
		if ok[i] {
			latencies = append(latencies, lat[i])
			issued++
		}
	}
	return issued, int(errCount.Load()), latencies, elapsed
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

func summarize(name string, issued, errs int, lat []time.Duration, elapsed time.Duration) result {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r := result{Name: name, Issued: issued, Errors: errs, Elapsed: elapsed}
	if elapsed > 0 {
		r.Throughput = float64(issued) / elapsed.Seconds()
	}
	r.P50, r.P95, r.P99 = percentile(lat, 0.50), percentile(lat, 0.95), percentile(lat, 0.99)
	return r
}
