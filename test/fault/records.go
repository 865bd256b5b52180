package fault

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"rekey.io/rekey/pkg/issuance"
)

// recordsPrefix is where the replicas keep their issuance records (the
// default --etcd-private-prefix).
const recordsPrefix = "/rekey.io-private/issued/"

// recordWatch keeps every issuance record written over the run, from a
// watch on the records' prefix: those a completed rotation prunes too, so
// that the checker can ask every certificate for its record.
type recordWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	records []issuance.Record
	// rev is the newest revision the watch has reported (events or
	// progress); broken says why it missed events, if it did.
	rev    int64
	broken string
}

// watchRecords starts the watch at the etcd cluster's current revision.
// A watch that requires a leader is cancelled when its member loses the
// leader (an etcd fault); it is then started again from the revision after
// the last it reported, so that no event is missed while etcd keeps the
// history (rekey compacts what is five minutes old).
func watchRecords(client *clientv3.Client) (*recordWatch, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	resp, err := client.Get(ctx, recordsPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return nil, fmt.Errorf("reading the records' revision: %w", err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	w := &recordWatch{cancel: wcancel, done: make(chan struct{}), rev: resp.Header.Revision}
	go func() {
		defer close(w.done)
		for wctx.Err() == nil {
			w.mu.Lock()
			from, broken := w.rev+1, w.broken
			w.mu.Unlock()
			if broken != "" {
				return
			}
			// Requiring a leader moves the watch off a member cut off
			// from its peers instead of waiting on it.
			ch := client.Watch(clientv3.WithRequireLeader(wctx), recordsPrefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
			for wr := range ch {
				w.take(wr)
			}
			pace(wctx, 100*time.Millisecond)
		}
	}()
	return w, nil
}

func (w *recordWatch) take(wr clientv3.WatchResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wr.CompactRevision > 0 && w.broken == "" {
		w.broken = fmt.Sprintf("compacted at revision %d before the watch read it", wr.CompactRevision)
		return
	}
	if wr.Err() != nil {
		// Cancelled (no leader on its member, the end of the run): it is
		// started again from the last revision it reported.
		return
	}
	for _, ev := range wr.Events {
		if ev.Type != clientv3.EventTypePut {
			continue
		}
		var rec issuance.Record
		if err := json.Unmarshal(ev.Kv.Value, &rec); err != nil {
			if w.broken == "" {
				w.broken = fmt.Sprintf("record %s: %v", ev.Kv.Key, err)
			}
			continue
		}
		w.records = append(w.records, rec)
	}
	if wr.Header.Revision > w.rev {
		w.rev = wr.Header.Revision
	}
}

// finish waits (bounded) until the watch has caught up with the cluster's
// revision now, stops it and returns every record it saw and whether it
// saw them all (with why not).
func (w *recordWatch) finish(client *clientv3.Client) ([]issuance.Record, bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	resp, err := client.Get(ctx, recordsPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	caughtUp := err == nil
	if caughtUp {
		for {
			w.mu.Lock()
			rev, broken := w.rev, w.broken
			w.mu.Unlock()
			if rev >= resp.Header.Revision || broken != "" {
				break
			}
			// Progress notifications carry the watch's revision when no
			// record changes. They go to the watch stream of the context's
			// metadata: the watch's own requires a leader.
			_ = client.RequestProgress(clientv3.WithRequireLeader(ctx))
			pace(ctx, 200*time.Millisecond)
			if ctx.Err() != nil {
				caughtUp = false
				break
			}
		}
	}
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err != nil:
		return w.records, false, fmt.Sprintf("reading the final revision: %v", err)
	case w.broken != "":
		return w.records, false, w.broken
	case !caughtUp:
		return w.records, false, fmt.Sprintf("the watch did not reach revision %d within 90s (at %d)", resp.Header.Revision, w.rev)
	}
	return w.records, true, ""
}
