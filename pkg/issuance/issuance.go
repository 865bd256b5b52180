// Package issuance records every certificate rekey issues (serial, request,
// requester, signer, validity) in etcd under the private prefix, apart from
// the API objects, so that a rotation can tell who has not renewed.
//
// Records are read a page at a time (a CA may hold many), and deleted once
// they can no longer matter: when the certificate has expired (the
// cleaner) and when the CA key that signed it is destroyed (the CA
// controller, at the end of a rotation).
package issuance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Record is one issued certificate.
type Record struct {
	Serial    string `json:"serial"`
	CSRName   string `json:"csrName"`
	CSRUID    string `json:"csrUID"`
	Requester string `json:"requester"`
	// Subject is the certificate's subject (RFC 2253): with Requester, it
	// says whether a certificate of the previous CA was renewed.
	Subject string `json:"subject,omitempty"`
	// Holder is the user the certificate authenticates as when it is a
	// client certificate (its subject common name), empty otherwise: a
	// certificate of the same subject that the holder itself requested
	// renews it (a node's first certificate is requested with its
	// bootstrap identity, its renewal as system:node:NAME).
	Holder     string    `json:"holder,omitempty"`
	SignerName string    `json:"signerName"`
	CAName     string    `json:"caName"`
	CAKeyID    string    `json:"caKeyID"`
	NotBefore  time.Time `json:"notBefore"`
	NotAfter   time.Time `json:"notAfter"`
}

// maxBatch bounds the records written or deleted in one etcd transaction:
// etcd allows 128 operations per transaction by default, and a write batch
// also puts one revision key per CA it holds (at most 2*maxBatch).
const maxBatch = 60

// DefaultPageSize is how many records one read returns: about 250 KB of
// JSON, so what a reader holds does not grow with a CA's records.
const DefaultPageSize = 1000

// Recorder writes and lists records. Concurrent Record calls are grouped
// into one etcd transaction (group commit): under load the signer pays one
// etcd round trip per batch instead of one per certificate, and an idle
// signer still writes at once.
type Recorder struct {
	client *clientv3.Client
	prefix string
	// revPrefix holds one key per CA, written with each batch of its
	// records: its mod revision says whether the CA's records changed.
	revPrefix string
	queue     chan *pending
	// stopped is closed when the flush loop has ended: a Record from then
	// on fails at once instead of waiting for its caller's deadline.
	stopped chan struct{}
	// PageSize is how many records one read returns (DefaultPageSize
	// unless set before use).
	PageSize int
}

type pending struct {
	key, value string
	caName     string
	done       chan error
}

// ErrStopped: the Recorder's context ended; nothing more is recorded.
var ErrStopped = errors.New("the issuance recorder has stopped")

// NewRecorder stores records under prefix/issued/<ca>/<serial> until ctx
// is done. Records still queued then, and any asked for later, fail with
// ErrStopped (their certificates are then never published).
func NewRecorder(ctx context.Context, client *clientv3.Client, prefix string) *Recorder {
	r := &Recorder{client: client, prefix: path.Join(prefix, "issued"), revPrefix: path.Join(prefix, "issuedrev"),
		queue: make(chan *pending, 4*maxBatch), stopped: make(chan struct{}), PageSize: DefaultPageSize}
	go r.flushLoop(ctx)
	return r
}

// Record stores one record and returns once it is durable in etcd. It is
// called before the certificate is published, so no published certificate
// is ever missing from the records.
func (r *Recorder) Record(ctx context.Context, rec Record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	p := &pending{key: path.Join(r.prefix, rec.CAName, rec.Serial), value: string(data), caName: rec.CAName, done: make(chan error, 1)}
	select {
	case r.queue <- p:
	case <-r.stopped:
		return fmt.Errorf("recording issuance of %s: %w", rec.Serial, ErrStopped)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err = <-p.done:
	case <-r.stopped:
		// The loop has ended: it answered p, or p was queued after its
		// last look and nobody will.
		select {
		case err = <-p.done:
		default:
			err = ErrStopped
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("recording issuance of %s: %w", rec.Serial, err)
	}
	return nil
}

func (r *Recorder) flushLoop(ctx context.Context) {
	defer r.failQueued()
	for {
		var first *pending
		select {
		case first = <-r.queue:
		case <-ctx.Done():
			return
		}
		batch := []*pending{first}
	drain:
		for len(batch) < maxBatch {
			select {
			case p := <-r.queue:
				batch = append(batch, p)
			default:
				break drain
			}
		}
		// One put per record and one per CA in the batch (at most
		// 2*maxBatch operations): a CA's revision key changes in the same
		// transaction as its records, never apart from them.
		ops := make([]clientv3.Op, 0, 2*len(batch))
		cas := map[string]bool{}
		for _, p := range batch {
			ops = append(ops, clientv3.OpPut(p.key, p.value))
			if !cas[p.caName] {
				cas[p.caName] = true
				ops = append(ops, clientv3.OpPut(path.Join(r.revPrefix, p.caName), ""))
			}
		}
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := r.client.Txn(wctx).Then(ops...).Commit()
		cancel()
		for _, p := range batch {
			p.done <- err
		}
	}
}

// failQueued marks the Recorder stopped and fails what is queued: a Record
// racing the stop either sees stopped or had its record queued before,
// and then finds it failed here.
func (r *Recorder) failQueued() {
	close(r.stopped)
	for {
		select {
		case p := <-r.queue:
			p.done <- ErrStopped
		default:
			return
		}
	}
}

// List returns every record of a CA, all in memory: for tests and small
// CAs. Readers that must not grow with a CA use Scan.
func (r *Recorder) List(ctx context.Context, caName string) ([]Record, error) {
	var out []Record
	err := r.Scan(ctx, caName, func(rec Record) error {
		out = append(out, rec)
		return nil
	})
	return out, err
}

// Scan calls fn with every record of a CA, reading them PageSize at a time
// and all at the revision of the first page (one consistent snapshot, as
// the unpaged read was). An error from fn stops the scan and is returned.
func (r *Recorder) Scan(ctx context.Context, caName string, fn func(Record) error) error {
	return r.scan(ctx, path.Join(r.prefix, caName)+"/", true, func(page []Record) error {
		for _, rec := range page {
			if err := fn(rec); err != nil {
				return err
			}
		}
		return nil
	})
}

// Revision is the etcd revision at which a CA's records last changed by a
// write (0 if never): equal revisions mean the same records, so a reader
// may keep what it computed from them. Pruning does not move it (see
// Prune).
func (r *Recorder) Revision(ctx context.Context, caName string) (int64, error) {
	resp, err := r.client.Get(ctx, path.Join(r.revPrefix, caName))
	if err != nil {
		return 0, fmt.Errorf("reading the records revision of %s: %w", caName, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return resp.Kvs[0].ModRevision, nil
}

// Prune deletes the records drop selects, of one CA or, with caName "",
// of every CA, a page at a time; it returns how many it deleted. It is
// idempotent and safe to stop anywhere: a second run deletes what the
// first did not reach. Records are written once and never changed, so a
// record read as due is still due when it is deleted.
//
// Pruning does not move Revision: the CA controller only prunes what its
// count no longer reads (records of expired certificates, which it skips,
// and of a destroyed key, which is neither of the two it reads).
func (r *Recorder) Prune(ctx context.Context, caName string, drop func(Record) bool) (int, error) {
	prefix := r.prefix + "/"
	if caName != "" {
		prefix = path.Join(r.prefix, caName) + "/"
	}
	deleted := 0
	err := r.scanKVs(ctx, prefix, false, func(kvs []*mvccpb.KeyValue) error {
		var ops []clientv3.Op
		for _, kv := range kvs {
			var rec Record
			if err := json.Unmarshal(kv.Value, &rec); err != nil {
				// Left for a person to look at; Scan reports it.
				continue
			}
			if drop(rec) {
				ops = append(ops, clientv3.OpDelete(string(kv.Key)))
			}
		}
		for len(ops) > 0 {
			n := min(len(ops), maxBatch)
			if _, err := r.client.Txn(ctx).Then(ops[:n]...).Commit(); err != nil {
				return fmt.Errorf("deleting issuance records: %w", err)
			}
			deleted += n
			ops = ops[n:]
		}
		return nil
	})
	return deleted, err
}

// scan reads the records under prefix a page at a time.
func (r *Recorder) scan(ctx context.Context, prefix string, snapshot bool, fn func([]Record) error) error {
	return r.scanKVs(ctx, prefix, snapshot, func(kvs []*mvccpb.KeyValue) error {
		page := make([]Record, len(kvs))
		for i, kv := range kvs {
			if err := json.Unmarshal(kv.Value, &page[i]); err != nil {
				return fmt.Errorf("record %s is corrupt: %w", kv.Key, err)
			}
		}
		return fn(page)
	})
}

// scanKVs reads the keys under prefix PageSize at a time. With snapshot,
// every read is at the revision of the first; without, each is the latest
// (what Prune needs, since it deletes as it goes).
//
// etcd counts every key from a read's start to its range end, whatever
// its limit, so paging one long range costs the square of its length
// (measured: 100,000 records in pages of 1,000 took 2.5 times as long as
// in one read). So the range is first cut into sub-ranges that each hold
// at most a few pages (split), and only those are paged.
func (r *Recorder) scanKVs(ctx context.Context, prefix string, snapshot bool, fn func([]*mvccpb.KeyValue) error) error {
	size := int64(r.PageSize)
	if size <= 0 {
		size = DefaultPageSize
	}
	var rev int64
	if snapshot {
		resp, err := r.client.Get(ctx, prefix, clientv3.WithCountOnly())
		if err != nil {
			return fmt.Errorf("reading issuance records under %s: %w", prefix, err)
		}
		rev = resp.Header.Revision
	}
	page := func(from, end string) error {
		for {
			opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(size)}
			if rev != 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			resp, err := r.client.Get(ctx, from, opts...)
			if err != nil {
				return fmt.Errorf("reading issuance records under %s: %w", prefix, err)
			}
			if len(resp.Kvs) == 0 {
				return nil
			}
			if err := fn(resp.Kvs); err != nil {
				return err
			}
			if !resp.More {
				return nil
			}
			// The next key after the last one read.
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	return r.split(ctx, prefix, clientv3.GetPrefixRangeEnd(prefix), prefix, rev, 4*size, page)
}

// split calls fn, in key order, with sub-ranges of [from, end) that hold
// at most max keys each. [from, end) is the range of keys that start with
// stem (or, at the edges, a part of it): a range too large is cut by the
// next byte after stem, one sub-range per printable byte, and each cut
// again as needed. Empty sub-ranges cost one small count each.
func (r *Recorder) split(ctx context.Context, from, end, stem string, rev, max int64, fn func(from, end string) error) error {
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithCountOnly()}
	if rev != 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := r.client.Get(ctx, from, opts...)
	if err != nil {
		return fmt.Errorf("counting issuance records: %w", err)
	}
	switch {
	case resp.Count == 0:
		return nil
	case resp.Count <= max || from != stem || len(stem) > 512:
		// Small, or an edge range (keys with bytes outside the printable
		// ones, which rekey does not write): paged as it is.
		return fn(from, end)
	}
	// Keys that are stem itself or continue with a byte below ' '.
	if err := r.split(ctx, stem, stem+" ", stem+" ", rev, max, fn); err != nil {
		return err
	}
	for b := byte(' '); b < '~'; b++ {
		child := stem + string([]byte{b})
		if err := r.split(ctx, child, stem+string([]byte{b + 1}), child, rev, max, fn); err != nil {
			return err
		}
	}
	// '~' and above, to the end of the range.
	child := stem + "~"
	return r.split(ctx, child, end, child, rev, max, fn)
}
