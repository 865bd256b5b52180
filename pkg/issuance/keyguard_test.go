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

	"rekey.io/rekey/pkg/leaderelection"
	"rekey.io/rekey/test/etcdtest"
)

// keysGuard is a KeyGuard over etcd keys /keys/<keyID>: a key is live while
// its entry exists. Comparisons are cached unless asked fresh, as the
// server's guard does; caName "warmup" waits for release, so that the
// records sent meanwhile queue up for one batch.
type keysGuard struct {
	client  *clientv3.Client
	entered chan struct{}
	release chan struct{}

	mu    sync.Mutex
	cache map[string][]clientv3.Cmp
	calls []string // "ca/key" or "ca/key fresh", in order
}

func (g *keysGuard) Guard(ctx context.Context, caName, keyID string, fresh bool) ([]clientv3.Cmp, error) {
	if caName == "warmup" {
		close(g.entered)
		<-g.release
		return nil, nil
	}
	g.mu.Lock()
	call := caName + "/" + keyID
	if fresh {
		call += " fresh"
	}
	g.calls = append(g.calls, call)
	cmps, ok := g.cache[keyID]
	g.mu.Unlock()
	if ok && !fresh {
		return cmps, nil
	}
	resp, err := g.client.Get(ctx, "/keys/"+keyID)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("key %s: %w", keyID, ErrKeyRetired)
	}
	cmps = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision("/keys/"+keyID), "=", resp.Kvs[0].CreateRevision)}
	g.mu.Lock()
	g.cache[keyID] = cmps
	g.mu.Unlock()
	return cmps, nil
}

// TestGuardedBatchFailsOnlyTheRetiredKeysRecords: in one group commit, the
// records of a key destroyed since the guard last looked fail with
// ErrKeyRetired and are not written; the other records of the batch (same
// CA other key, another CA) are written.
func TestGuardedBatchFailsOnlyTheRetiredKeysRecords(t *testing.T) {
	client := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, k := range []string{"live", "dead"} {
		if _, err := client.Put(ctx, "/keys/"+k, ""); err != nil {
			t.Fatal(err)
		}
	}
	guard := &keysGuard{client: client, entered: make(chan struct{}), release: make(chan struct{}), cache: map[string][]clientv3.Cmp{}}
	r := NewRecorder(ctx, client, "/p")
	r.SetKeyGuard(guard)
	record := func(ca, key, serial string) error {
		return r.Record(ctx, Record{Serial: serial, CSRName: "csr-" + serial, CAName: ca, CAKeyID: key,
			NotBefore: time.Unix(0, 0).UTC(), NotAfter: time.Unix(3600, 0).UTC()})
	}
	// Both keys live: their comparisons are cached.
	for i, k := range []string{"live", "dead"} {
		if err := record("ca", k, fmt.Sprintf("a%d", i)); err != nil {
			t.Fatalf("a record of live key %s: %v", k, err)
		}
	}
	// The rotation completes: "dead" is destroyed.
	if _, err := client.Delete(ctx, "/keys/dead"); err != nil {
		t.Fatal(err)
	}
	warm := make(chan error, 1)
	go func() { warm <- record("warmup", "k", "w") }()
	<-guard.entered
	type want struct {
		ca, key, serial string
		retired         bool
	}
	batch := []want{
		{"ca", "live", "b1", false}, {"ca", "dead", "b2", true}, {"ca", "live", "b3", false},
		{"ca", "dead", "b4", true}, {"other", "live", "b5", false},
	}
	errs := make([]chan error, len(batch))
	for i, w := range batch {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- record(w.ca, w.key, w.serial) }()
	}
	// All queued behind the warm-up batch: they make one batch.
	for len(r.queue) < len(batch) {
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	guard.mu.Lock()
	before := len(guard.calls)
	guard.mu.Unlock()
	close(guard.release)
	if err := <-warm; err != nil {
		t.Fatal(err)
	}
	for i, w := range batch {
		err := <-errs[i]
		switch {
		case w.retired && !errors.Is(err, ErrKeyRetired):
			t.Errorf("record %s of the destroyed key: got %v, want ErrKeyRetired", w.serial, err)
		case !w.retired && err != nil:
			t.Errorf("record %s of a live key failed with the retired key's: %v", w.serial, err)
		}
		resp, err := client.Get(ctx, "/p/issued/"+w.ca+"/"+w.serial)
		if err != nil {
			t.Fatal(err)
		}
		if written := len(resp.Kvs) == 1; written == w.retired {
			t.Errorf("record %s (retired key: %v) written: %v", w.serial, w.retired, written)
		}
	}
	// One batch: its cached comparisons failed the transaction, the keys
	// were read again and the live ones written.
	guard.mu.Lock()
	calls := guard.calls[before:]
	guard.mu.Unlock()
	// The records queued in any order: each half is compared sorted.
	if len(calls) == 6 {
		sort.Strings(calls[:3])
		sort.Strings(calls[3:])
	}
	wantCalls := []string{"ca/dead", "ca/live", "other/live", "ca/dead fresh", "ca/live fresh", "other/live fresh"}
	if fmt.Sprint(calls) != fmt.Sprint(wantCalls) {
		t.Errorf("guard calls %v, want %v (one batch, read again once after its transaction failed)", calls, wantCalls)
	}
}

// TestPruneOfAnEndedLeadershipTermIsRefused: pruning is the leader's (the
// cleaner, a rotation's Complete); a prune whose context belongs to a term
// that no longer leads deletes nothing.
func TestPruneOfAnEndedLeadershipTermIsRefused(t *testing.T) {
	client := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewRecorder(ctx, client, "/p")
	if err := r.Record(ctx, Record{Serial: "1", CAName: "ca", CAKeyID: "k", NotAfter: time.Unix(1, 0).UTC()}); err != nil {
		t.Fatal(err)
	}
	ended := leaderelection.WithFence(ctx, leaderelection.NewFence()) // no term: not leading
	n, err := r.Prune(ended, "", func(Record) bool { return true })
	if !errors.Is(err, leaderelection.ErrNotLeading) || n != 0 {
		t.Fatalf("Prune in an ended term: %d, %v; want 0, ErrNotLeading", n, err)
	}
	if recs, err := r.List(ctx, "ca"); err != nil || len(recs) != 1 {
		t.Fatalf("after a refused prune: %v, %v; want the record", recs, err)
	}
}
