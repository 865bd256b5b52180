package certificateauthority

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/signing/cabinding"
	"rekey.io/rekey/test/etcdtest"
)

// BenchmarkPreparedReconcile measures the read a Prepared CA's reconcile
// makes of its issuance records, against a real (embedded) etcd holding
// REKEY_BENCH_RECORDS records (default 200,000) of one CA spread over
// 10,000 identities, of which half have renewed (see benchKey):
//   - unpaged: the code before paging (one range read of every record,
//     all decoded in memory, then counted);
//   - paged-count: countPending reading every record a page at a time
//     (what a reconcile costs after the records changed);
//   - unchanged: countPending when the records have not changed since
//     the last count (one read of the CA's revision key).
//
// live-heap-B is the most the process's live heap (after a collection)
// grew over one extra, untimed operation, sampled after the read and after
// the count (unpaged) or at every page (paged); the etcd server is in the
// same process, as in standalone mode, but what it holds during a read is
// not sampled.
//
//	REKEY_BENCH_RECORDS=1000000 REKEY_BENCH_NO_HEAP=1 go test -run '^$' -bench BenchmarkPreparedReconcile -benchtime 1x ./pkg/controller/certificateauthority/
func BenchmarkPreparedReconcile(b *testing.B) {
	n := 200000
	if s := os.Getenv("REKEY_BENCH_RECORDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		n = v
	}
	var err error
	client := etcdtest.Start(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const prefix = "/rekey.io-private"
	start := time.Now()
	bulkLoad(b, client, prefix, n)
	b.Logf("loaded %d records in %v", n, time.Since(start).Round(time.Millisecond))
	rec := issuance.NewRecorder(ctx, client, prefix)
	if s := os.Getenv("REKEY_BENCH_PAGE"); s != "" {
		if rec.PageSize, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	// One write through the recorder, so the CA has a revision key.
	if err := rec.Record(ctx, issuance.Record{Serial: "ffffffff", CAName: "bench", CAKeyID: "bench-2", Requester: "x", Subject: "CN=x", NotAfter: time.Now().Add(time.Hour)}); err != nil {
		b.Fatal(err)
	}
	binding := &cabinding.Binding{CAName: "bench", KeyID: "bench-2", Previous: &cabinding.Key{KeyID: "bench-1"}}
	ca := &rotationv1alpha1.CertificateAuthority{}
	ca.Name = "bench"

	b.Run("unpaged", func(b *testing.B) {
		b.ReportAllocs()
		peak := &peak{}
		op := func() {
			status := &rotationv1alpha1.CertificateAuthorityStatus{}
			if err := countUnpaged(ctx, client, prefix, binding, status, peak); err != nil {
				b.Fatal(err)
			}
		}
		for i := 0; i < b.N; i++ {
			op()
		}
		peak.measure(b, op)
	})
	b.Run("paged-count", func(b *testing.B) {
		b.ReportAllocs()
		peak := &peak{}
		c := &Controller{records: &sampled{Recorder: rec, peak: peak}, clock: clock.RealClock{}}
		op := func() {
			c.forgetCount("bench")
			status := &rotationv1alpha1.CertificateAuthorityStatus{}
			if err := c.countPending(ctx, ca, binding, status); err != nil {
				b.Fatal(err)
			}
			if status.PendingRenewal == 0 {
				b.Fatal("nothing pending")
			}
		}
		for i := 0; i < b.N; i++ {
			op()
		}
		peak.measure(b, op)
	})
	b.Run("unchanged", func(b *testing.B) {
		b.ReportAllocs()
		c := &Controller{records: rec, clock: clock.RealClock{}}
		status := &rotationv1alpha1.CertificateAuthorityStatus{}
		if err := c.countPending(ctx, ca, binding, status); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := c.countPending(ctx, ca, binding, status); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// bulkLoad writes n records of CA "bench" straight into etcd, 100 to a
// transaction, 8 transactions at a time.
func bulkLoad(b *testing.B, client *clientv3.Client, prefix string, n int) {
	notAfter := time.Now().Add(365 * 24 * time.Hour)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for first := w * 100; first < n; first += 800 {
				ops := make([]clientv3.Op, 0, 100)
				for i := first; i < min(first+100, n); i++ {
					// Serials spread like rekey's random ones.
					r := issuance.Record{Serial: fmt.Sprintf("%x", uint64(i+1)*0x9E3779B97F4A7C15), CSRName: fmt.Sprintf("csr-%d", i), CSRUID: fmt.Sprintf("uid-%d", i),
						Requester: fmt.Sprintf("system:node:n%d", i%10000), Subject: fmt.Sprintf("CN=system:node:n%d,O=system:nodes", i%10000),
						SignerName: "rekey.io/kube-apiserver-client-kubelet", CAName: "bench", CAKeyID: benchKey(i),
						NotBefore: notAfter.Add(-365 * 24 * time.Hour), NotAfter: notAfter}
					data, _ := json.Marshal(r)
					ops = append(ops, clientv3.OpPut(path.Join(prefix, "issued", "bench", r.Serial), string(data)))
				}
				if _, err := client.Txn(context.Background()).Then(ops...).Commit(); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// benchKey: identities 0-4999 have certificates of the previous key only
// (pending), 5000-9999 of both (renewed).
func benchKey(i int) string {
	if i%10000 < 5000 || (i/10000)%2 == 0 {
		return "bench-1"
	}
	return "bench-2"
}

// countUnpaged is countPending as it was before paging: one read of every
// record, then the count.
func countUnpaged(ctx context.Context, client *clientv3.Client, prefix string, b *cabinding.Binding, status *rotationv1alpha1.CertificateAuthorityStatus, peak *peak) error {
	resp, err := client.Get(ctx, path.Join(prefix, "issued", "bench")+"/", clientv3.WithPrefix())
	if err != nil {
		return err
	}
	records := make([]issuance.Record, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var rec issuance.Record
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return err
		}
		records = append(records, rec)
	}
	peak.sample()
	now := time.Now()
	renewed := map[[2]string]bool{}
	for _, r := range records {
		if r.CAKeyID == b.KeyID {
			renewed[[2]string{r.Requester, r.Subject}] = true
		}
	}
	var pending []issuance.Record
	for _, r := range records {
		if r.CAKeyID == b.Previous.KeyID && r.NotAfter.After(now) && !renewed[[2]string{r.Requester, r.Subject}] {
			pending = append(pending, r)
		}
	}
	peak.sample()
	status.PendingRenewal = int32(len(pending))
	return nil
}

// sampled samples the heap at every page a scan reads.
type sampled struct {
	*issuance.Recorder
	peak *peak
}

func (s *sampled) Scan(ctx context.Context, caName string, fn func(issuance.Record) error) error {
	n := 0
	return s.Recorder.Scan(ctx, caName, func(r issuance.Record) error {
		if n++; n%issuance.DefaultPageSize == 0 {
			s.peak.sample()
		}
		return fn(r)
	})
}

// peak is the most the live heap grew above where it was at the start of
// a measured operation.
type peak struct {
	base, max uint64
	live      bool
}

func (p *peak) sample() {
	if !p.live {
		return
	}
	// What is still reachable, not garbage the collector has not reached.
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	if m.HeapAlloc > p.base && m.HeapAlloc-p.base > p.max {
		p.max = m.HeapAlloc - p.base
	}
}

// measure runs op once more, untimed, sampling the live heap.
func (p *peak) measure(b *testing.B, op func()) {
	if os.Getenv("REKEY_BENCH_NO_HEAP") != "" {
		// A collection per page is slow with a million records.
		return
	}
	b.StopTimer()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	p.base, p.live = m.HeapAlloc, true
	op()
	p.live = false
	b.ReportMetric(float64(p.max), "live-heap-B")
}
