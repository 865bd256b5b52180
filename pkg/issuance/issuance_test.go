package issuance

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

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
