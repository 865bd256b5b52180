package issuance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"rekey.io/rekey/test/etcdtest"
)

func fp(i int) string { return fmt.Sprintf("%064x", i+1) }

// TestLookupBySHA256AndSerial: a record is found by its certificate's
// SHA-256 (any case) through the index written with it, and by serial in
// its CA or in every CA; a serial two CAs issued is refused without the CA.
func TestLookupBySHA256AndSerial(t *testing.T) {
	client := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewRecorder(ctx, client, "/p")
	recs := []Record{
		{Serial: "a1b", CAName: "a", CAKeyID: "a-1", CSRName: "one", SHA256: fp(1)},
		{Serial: "c", CAName: "b", CAKeyID: "b-1", CSRName: "two", SHA256: fp(2)},
		{Serial: "c", CAName: "a", CAKeyID: "a-1", CSRName: "three", SHA256: fp(3)},
		{Serial: "ff", CAName: "a", CAKeyID: "a-1", CSRName: "old"}, // written before SHA256
	}
	for _, rec := range recs {
		if err := r.Record(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := r.BySHA256(ctx, strings.ToUpper(fp(2)))
	if err != nil || !ok || got.CSRName != "two" {
		t.Fatalf("BySHA256(2) = %+v %v %v", got, ok, err)
	}
	if _, ok, err := r.BySHA256(ctx, fp(9)); err != nil || ok {
		t.Fatalf("BySHA256 of an unknown certificate: %v %v", ok, err)
	}
	if _, _, err := r.BySHA256(ctx, "../issued/a/0a1b"); err == nil {
		t.Fatal("BySHA256 accepted a key path")
	}
	for _, tc := range []struct {
		ca, serial, want string
		found            bool
	}{
		{"a", "A1B", "one", true},
		{"", "00:0a:1b", "one", true},
		{"b", "0C", "two", true},
		{"", "ff", "old", true},
		{"b", "ff", "", false},
		{"", "123", "", false},
		{"../issuedfp", "0c", "", false},
	} {
		got, ok, err := r.BySerial(ctx, tc.ca, tc.serial)
		if err != nil || ok != tc.found || got.CSRName != tc.want {
			t.Errorf("BySerial(%q, %q) = %+v %v %v, want %q %v", tc.ca, tc.serial, got, ok, err, tc.want, tc.found)
		}
	}
	if _, _, err := r.BySerial(ctx, "", "c"); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("a serial of two CAs without the CA: %v, want ErrAmbiguous", err)
	}
	if _, _, err := r.BySerial(ctx, "", "xyz"); err == nil {
		t.Fatal("a serial that is not hex was accepted")
	}
}

// TestPruneDeletesTheIndex: the index key of a pruned record goes with it
// (no lookup finds a record that is gone, no key outlives it), and the
// index keys of the records kept stay.
func TestPruneDeletesTheIndex(t *testing.T) {
	client := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewRecorder(ctx, client, "/p")
	r.PageSize = 7
	const n = 150 // several transactions of maxBatch
	for i := 0; i < n; i++ {
		key := "k1"
		if i%3 == 0 {
			key = "k2"
		}
		if err := r.Record(ctx, Record{Serial: fmt.Sprintf("%x", i+1), CAName: "a", CAKeyID: key, SHA256: fp(i)}); err != nil {
			t.Fatal(err)
		}
	}
	pruned, err := r.Prune(ctx, "a", func(rec Record) bool { return rec.CAKeyID == "k1" })
	if err != nil || pruned != 100 {
		t.Fatalf("pruned %d (err %v), want 100", pruned, err)
	}
	resp, err := client.Get(ctx, "/p/issuedfp/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 50 {
		t.Fatalf("%d index keys left (err %v), want 50", resp.Count, err)
	}
	for _, i := range []int{0, 1, 2} {
		_, ok, err := r.BySHA256(ctx, fp(i))
		if err != nil || ok != (i%3 == 0) {
			t.Errorf("BySHA256(%d) found=%v err=%v", i, ok, err)
		}
	}
}

// TestEveryTransactionFitsEtcdsLimit: a full batch of records, each of
// its own CA (the most operations a batch can hold), commits within the
// 128 operations etcd allows, as does a prune of all of them.
func TestEveryTransactionFitsEtcdsLimit(t *testing.T) {
	if 3*maxBatch > 128 {
		t.Fatalf("a batch may hold %d operations, etcd allows 128", 3*maxBatch)
	}
	client := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewRecorder(ctx, client, "/p")
	var wg sync.WaitGroup
	errs := make(chan error, 4*maxBatch)
	for i := 0; i < 4*maxBatch; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if err := r.Record(ctx, Record{Serial: "1", CAName: fmt.Sprintf("ca-%d", i), SHA256: fp(i), NotAfter: time.Unix(1, 0)}); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n, err := r.Prune(ctx, "", func(Record) bool { return true }); err != nil || n != 4*maxBatch {
		t.Fatalf("pruned %d (err %v), want %d", n, err, 4*maxBatch)
	}
}
