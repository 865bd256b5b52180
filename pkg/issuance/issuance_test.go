package issuance

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"rekey.io/rekey/test/etcdtest"
)

// TestRecordsAreDurableAndGroupCommitted: concurrent records all land, each
// once, and Record returns only after its record is in etcd.
func TestRecordsAreDurableAndGroupCommitted(t *testing.T) {
	client := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewRecorder(ctx, client, "/rekey.io-private")
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rec := Record{Serial: fmt.Sprintf("%04x", i), CSRName: fmt.Sprintf("csr-%d", i), CAName: "team-ca", CAKeyID: "team-ca-1",
				NotBefore: time.Unix(0, 0).UTC(), NotAfter: time.Unix(3600, 0).UTC()}
			if err := r.Record(ctx, rec); err != nil {
				errs <- err
				return
			}
			// Durable: visible to a read right after Record returns.
			resp, err := client.Get(ctx, "/rekey.io-private/issued/team-ca/"+rec.Serial)
			if err != nil || len(resp.Kvs) != 1 {
				errs <- fmt.Errorf("record %s not in etcd after Record returned: %v", rec.Serial, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := r.List(ctx, "team-ca")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d records, want %d", len(got), n)
	}
	sort.Slice(got, func(i, j int) bool { return got[i].Serial < got[j].Serial })
	if got[7].CSRName != "csr-7" || got[7].CAKeyID != "team-ca-1" {
		t.Fatalf("record 7 = %+v", got[7])
	}
	if other, err := r.List(ctx, "other-ca"); err != nil || len(other) != 0 {
		t.Fatalf("another CA's records: %v %v", other, err)
	}
}

func TestRecordStopsWithItsContext(t *testing.T) {
	client := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	r := NewRecorder(ctx, client, "/p")
	cancel()
	if err := r.Record(ctx, Record{Serial: "1", CAName: "ca"}); err == nil {
		t.Fatal("Record succeeded after its context was cancelled")
	}
}

// TestScanReadsEveryPage: with a page of 3, ten records of one CA are read
// in four pages, each record once, and another CA's records not at all.
func TestScanReadsEveryPage(t *testing.T) {
	client := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewRecorder(ctx, client, "/p")
	r.PageSize = 3
	for i := 0; i < 10; i++ {
		for _, ca := range []string{"team", "team-ca"} {
			if err := r.Record(ctx, Record{Serial: fmt.Sprintf("%02x", i), CAName: ca, CAKeyID: ca + "-1"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	seen := map[string]int{}
	pages := 0
	err := r.scan(ctx, "/p/issued/team/", true, func(page []Record) error {
		pages++
		if len(page) > 3 {
			t.Errorf("page of %d records, want at most 3", len(page))
		}
		for _, rec := range page {
			if rec.CAName != "team" {
				t.Errorf("read %s's record scanning team's", rec.CAName)
			}
			seen[rec.Serial]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 10 || pages != 4 {
		t.Fatalf("%d records in %d pages, want 10 in 4", len(seen), pages)
	}
	for s, n := range seen {
		if n != 1 {
			t.Errorf("record %s read %d times", s, n)
		}
	}
	var all []Record
	if err := r.Scan(ctx, "team", func(rec Record) error { all = append(all, rec); return nil }); err != nil || len(all) != 10 {
		t.Fatalf("Scan read %d records (err %v), want 10", len(all), err)
	}
}

// TestRevisionChangesOnlyWithTheCAsRecords: a reader can tell that a CA's
// records are unchanged without reading them.
func TestRevisionChangesOnlyWithTheCAsRecords(t *testing.T) {
	client := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewRecorder(ctx, client, "/p")
	if err := r.Record(ctx, Record{Serial: "1", CAName: "a"}); err != nil {
		t.Fatal(err)
	}
	before, err := r.Revision(ctx, "a")
	if err != nil || before == 0 {
		t.Fatalf("revision %d, err %v", before, err)
	}
	if err := r.Record(ctx, Record{Serial: "1", CAName: "b"}); err != nil {
		t.Fatal(err)
	}
	if same, err := r.Revision(ctx, "a"); err != nil || same != before {
		t.Fatalf("a's revision moved from %d to %d (err %v) when b's records changed", before, same, err)
	}
	if err := r.Record(ctx, Record{Serial: "2", CAName: "a"}); err != nil {
		t.Fatal(err)
	}
	if after, err := r.Revision(ctx, "a"); err != nil || after <= before {
		t.Fatalf("a's revision %d after a record, was %d (err %v)", after, before, err)
	}
}

// TestPruneDeletesOnlyWhatIsDue, over several pages and across CAs, and
// is idempotent.
func TestPruneDeletesOnlyWhatIsDue(t *testing.T) {
	client := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewRecorder(ctx, client, "/p")
	r.PageSize = 3
	now := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 20; i++ {
		notAfter := now.Add(time.Hour)
		if i%2 == 0 {
			notAfter = now.Add(-time.Hour)
		}
		ca := "a"
		if i%4 >= 2 {
			ca = "b"
		}
		if err := r.Record(ctx, Record{Serial: fmt.Sprintf("%02x", i), CAName: ca, CAKeyID: ca + "-1", NotAfter: notAfter}); err != nil {
			t.Fatal(err)
		}
	}
	expired := func(rec Record) bool { return !rec.NotAfter.After(now) }
	for round := 0; round < 2; round++ {
		n, err := r.Prune(ctx, "", expired)
		if err != nil {
			t.Fatal(err)
		}
		if want := []int{10, 0}[round]; n != want {
			t.Fatalf("round %d pruned %d, want %d", round, n, want)
		}
	}
	resp, err := client.Get(ctx, "/p/issued/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 10 {
		t.Fatalf("%d records left, want the 10 valid ones", len(resp.Kvs))
	}
	// One CA's key: only its records go.
	n, err := r.Prune(ctx, "a", func(rec Record) bool { return rec.CAKeyID == "a-1" })
	if err != nil || n != 5 {
		t.Fatalf("pruned %d of a's records (err %v), want 5", n, err)
	}
	if left, _ := r.List(ctx, "b"); len(left) != 5 {
		t.Fatalf("b has %d records, want 5", len(left))
	}
}

// TestScanSplitsALargeRange: a CA with many records (more than a few
// pages) is read in sub-ranges, still each record once and in key order.
func TestScanSplitsALargeRange(t *testing.T) {
	client := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewRecorder(ctx, client, "/p")
	r.PageSize = 2
	var ops []clientv3.Op
	for i := 0; i < 90; i++ {
		// Serials as rekey writes them (hex, no leading zeros) and a few
		// keys no serial has, at the edges of the byte ranges.
		ops = append(ops, clientv3.OpPut(fmt.Sprintf("/p/issued/ca/%x", i*7919), fmt.Sprintf(`{"serial":"%x"}`, i*7919)))
	}
	for i, k := range []string{"\x01", "~~", "\x7f", "\xff"} {
		ops = append(ops, clientv3.OpPut("/p/issued/ca/"+k, fmt.Sprintf(`{"serial":"edge-%d"}`, i)))
	}
	for len(ops) > 0 {
		n := min(len(ops), 50)
		if _, err := client.Txn(ctx).Then(ops[:n]...).Commit(); err != nil {
			t.Fatal(err)
		}
		ops = ops[n:]
	}
	var serials []string
	if err := r.Scan(ctx, "ca", func(rec Record) error { serials = append(serials, rec.Serial); return nil }); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, s := range serials {
		seen[s] = true
	}
	if len(serials) != 94 || len(seen) != 94 {
		t.Fatalf("read %d records, %d distinct, want 94 once each", len(serials), len(seen))
	}
	n, err := r.Prune(ctx, "", func(Record) bool { return true })
	if err != nil || n != 94 {
		t.Fatalf("pruned %d (err %v), want 94", n, err)
	}
}

// TestRecordAfterStopFailsAtOnce: once the Recorder's context has ended, a
// Record fails with ErrStopped instead of waiting for its caller's
// deadline (a create in flight at SIGTERM used to hang until it, holding
// the server's shutdown).
func TestRecordAfterStopFailsAtOnce(t *testing.T) {
	client := etcdtest.Start(t)
	ctx, stop := context.WithCancel(context.Background())
	r := NewRecorder(ctx, client, "/rekey-private")
	stop()
	<-r.stopped
	for i := range 3 {
		req, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := r.Record(req, Record{Serial: fmt.Sprintf("a%d", i), CAName: "ca", NotAfter: time.Now().Add(time.Hour)})
		cancel()
		if !errors.Is(err, ErrStopped) {
			t.Fatalf("Record %d after the stop: %v, want ErrStopped", i, err)
		}
	}
	if resp, err := client.Get(context.Background(), "/rekey-private/issued/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("records stored after the stop: %v, %v", resp, err)
	}
}
