package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// memoryProbe reads an API server's memory after forcing a garbage
// collection (/debug/pprof/heap?gc=1, which needs --profiling), so that
// what is compared is what the server keeps, not the garbage of the load
// that happens to be waiting for the next collection.
type memoryProbe struct {
	name   string
	pid    int
	client rest.Interface
}

// memory is one reading: the process's RSS and the Go heap in use, both
// taken after a collection and a short pause for the runtime to return
// freed pages.
type memory struct {
	RSSMiB  float64
	HeapMiB float64
}

func (p memoryProbe) read(ctx context.Context) (memory, error) {
	profile, err := p.client.Get().AbsPath("/debug/pprof/heap").Param("gc", "1").DoRaw(ctx)
	if err != nil {
		return memory{}, fmt.Errorf("%s: forcing a collection: %w", p.name, err)
	}
	if memProfileDir != "" {
		_ = os.WriteFile(filepath.Join(memProfileDir, fmt.Sprintf("%s-%d.heap.pprof", p.name, time.Now().Unix())), profile, 0o644)
	}
	time.Sleep(2 * time.Second)
	metrics, err := p.client.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return memory{}, fmt.Errorf("%s: reading /metrics: %w", p.name, err)
	}
	heap, ok := metricValue(metrics, "go_memstats_heap_inuse_bytes")
	if !ok {
		return memory{}, fmt.Errorf("%s: /metrics has no go_memstats_heap_inuse_bytes", p.name)
	}
	return memory{RSSMiB: rssMiB(p.pid), HeapMiB: heap / (1 << 20)}, nil
}

// metricValue finds an unlabelled sample in Prometheus text format.
func metricValue(text []byte, name string) (float64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}
