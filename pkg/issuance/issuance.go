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
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"rekey.io/rekey/pkg/leaderelection"
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
	// SHA256 is the SHA-256 of the certificate's DER in lowercase hex
	// (kube-apiserver's credential-id X509SHA256=<hex>): a revocation
	// finds the certificate by it (BySHA256). Empty in records written
	// before it existed; those are found by serial only.
	SHA256 string `json:"sha256,omitempty"`
}

// maxBatch bounds the records written or deleted in one etcd transaction:
// etcd allows 128 operations per transaction by default, and a write batch
// puts, per record, the record and its SHA-256 index key, and one revision
// key per CA it holds (at most 3*maxBatch = 120); a prune deletes the
// record and its index key (2*maxBatch). A guarded write's comparisons,
// at most two per CA key (KeyGuard), count apart from its operations.
const maxBatch = 40

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
	// fpPrefix indexes records by certificate SHA-256:
	// <fpPrefix>/<sha256> holds "<caName>/<serial>".
	fpPrefix string
	// revPrefix holds one key per CA, written with each batch of its
	// records: its mod revision says whether the CA's records changed.
	revPrefix string
	queue     chan *pending
	// guard, when set, conditions each record on its CA key being live
	// (SetKeyGuard).
	guard atomic.Pointer[guardBox]
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
	keyID      string
	// fpKey is the SHA-256 index key ("" for a record without SHA256).
	fpKey string
	done  chan error
}

// ErrKeyRetired: the CA key that signed a record's certificate is no
// longer live in etcd (a completed rotation destroyed it or dropped it
// from its CA's binding), so the record is refused and the certificate
// must not be published.
var ErrKeyRetired = errors.New("the CA key that signed is retired (a completed rotation destroyed it)")

// ErrStopped: the Recorder's context ended; nothing more is recorded.
var ErrStopped = errors.New("the issuance recorder has stopped")

// NewRecorder stores records under prefix/issued/<ca>/<serial>, and the
// SHA-256 index under prefix/issuedfp/<sha256>, until ctx is done. Records still queued then, and any asked for later, fail with
// ErrStopped (their certificates are then never published).
func NewRecorder(ctx context.Context, client *clientv3.Client, prefix string) *Recorder {
	r := &Recorder{client: client, prefix: path.Join(prefix, "issued"), revPrefix: path.Join(prefix, "issuedrev"), fpPrefix: path.Join(prefix, "issuedfp"),
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
	p := &pending{key: path.Join(r.prefix, rec.CAName, rec.Serial), value: string(data), caName: rec.CAName, keyID: rec.CAKeyID, done: make(chan error, 1)}
	if rec.SHA256 != "" {
		p.fpKey = r.fpKey(rec.SHA256)
	}
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
		r.commit(batch)
	}
}

// KeyGuard conditions records on their CA key being live: the record is
// the one thing written before a certificate is published, so a replica
// whose view of a CA is stale (it slept, its informer lags) and that
// records a signature after a completed rotation retired the key gets no
// record and publishes nothing. The key is checked when the record is
// written, not when the certificate is published: a certificate recorded
// while the key was live and published (by a separate write) after the
// rotation completed is not stopped here.
type KeyGuard interface {
	// Guard returns etcd comparisons that hold while key keyID of CA
	// caName is live (bound to the CA and not destroyed), as etcd holds it
	// now or, unless fresh, as it was last read: the record is written in a
	// transaction under them, and they are read again (fresh) when it
	// fails. It returns an error wrapping ErrKeyRetired when the key is not
	// live, and no comparisons for a key no rotation retires.
	Guard(ctx context.Context, caName, keyID string, fresh bool) ([]clientv3.Cmp, error)
}

type guardBox struct{ g KeyGuard }

// SetKeyGuard makes every record written from now on conditional on its
// CA key being live (KeyGuard); a record of a retired key fails with
// ErrKeyRetired, and the others of its batch are written.
func (r *Recorder) SetKeyGuard(g KeyGuard) {
	if g == nil {
		r.guard.Store(nil)
		return
	}
	r.guard.Store(&guardBox{g: g})
}

// maxGuardAttempts bounds how often a batch is written again after its
// guard's comparisons failed: each failure reads the keys' state afresh,
// and only a binding that changes again between the read and the write
// (a rotation step at that instant) fails a second time.
const maxGuardAttempts = 3

// commit writes one batch and answers each of its records. With a guard,
// the transaction is conditioned on every record's CA key being live; when
// the condition fails, the keys are read again, the records of retired
// keys fail with ErrKeyRetired and the rest are written again.
func (r *Recorder) commit(batch []*pending) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var guard KeyGuard
	if b := r.guard.Load(); b != nil {
		guard = b.g
	}
	for attempt := 1; ; attempt++ {
		var cmps []clientv3.Cmp
		if guard != nil {
			cmps, batch = r.guarded(ctx, guard, batch, attempt > 1)
			if len(batch) == 0 {
				return
			}
		}
		resp, err := r.client.Txn(ctx).If(cmps...).Then(r.ops(batch)...).Commit()
		if err == nil && !resp.Succeeded {
			if attempt < maxGuardAttempts {
				continue
			}
			err = errors.New("the CA key bindings kept changing while the records were written; try again")
		}
		for _, p := range batch {
			p.done <- err
		}
		return
	}
}

// guarded returns the comparisons for the records of batch whose CA key is
// live, and those records; the others are answered with the guard's error.
func (r *Recorder) guarded(ctx context.Context, guard KeyGuard, batch []*pending, fresh bool) ([]clientv3.Cmp, []*pending) {
	type caKey struct{ ca, key string }
	checked := map[caKey]error{}
	var cmps []clientv3.Cmp
	live := make([]*pending, 0, len(batch))
	for _, p := range batch {
		k := caKey{p.caName, p.keyID}
		err, ok := checked[k]
		if !ok {
			var c []clientv3.Cmp
			c, err = guard.Guard(ctx, p.caName, p.keyID, fresh)
			checked[k] = err
			if err == nil {
				cmps = append(cmps, c...)
			}
		}
		if err != nil {
			p.done <- err
			continue
		}
		live = append(live, p)
	}
	return cmps, live
}

// ops are the puts of a batch: two per record (the record, its SHA-256
// index key) and one per CA in the batch (at most 3*maxBatch operations):
// a CA's revision key and a record's index key change in the same
// transaction as the record, never apart from it.
func (r *Recorder) ops(batch []*pending) []clientv3.Op {
	ops := make([]clientv3.Op, 0, 3*len(batch))
	cas := map[string]bool{}
	for _, p := range batch {
		ops = append(ops, clientv3.OpPut(p.key, p.value))
		if p.fpKey != "" {
			ops = append(ops, clientv3.OpPut(p.fpKey, strings.TrimPrefix(p.key, r.prefix+"/")))
		}
		if !cas[p.caName] {
			cas[p.caName] = true
			ops = append(ops, clientv3.OpPut(path.Join(r.revPrefix, p.caName), ""))
		}
	}
	return ops
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
		// One entry per record: its delete and its index key's.
		var ops [][]clientv3.Op
		for _, kv := range kvs {
			var rec Record
			if err := json.Unmarshal(kv.Value, &rec); err != nil {
				// Left for a person to look at; Scan reports it.
				continue
			}
			if drop(rec) {
				// The record and its index key go in one transaction: no
				// index key outlives its record, none is deleted before.
				rops := []clientv3.Op{clientv3.OpDelete(string(kv.Key))}
				if rec.SHA256 != "" {
					rops = append(rops, clientv3.OpDelete(r.fpKey(rec.SHA256)))
				}
				ops = append(ops, rops)
			}
		}
		for len(ops) > 0 {
			n := min(len(ops), maxBatch)
			var txn []clientv3.Op
			for _, rops := range ops[:n] {
				txn = append(txn, rops...)
			}
			// Pruning is the leader's (the cleaner, a rotation's
			// Complete): a delete of a leadership term that ended is
			// refused as it is sent.
			if err := leaderelection.CheckContext(ctx, leaderelection.TargetEtcd); err != nil {
				return fmt.Errorf("deleting issuance records: %w", err)
			}
			if _, err := r.client.Txn(ctx).Then(txn...).Commit(); err != nil {
				return fmt.Errorf("deleting issuance records: %w", err)
			}
			deleted += n
			ops = ops[n:]
		}
		return nil
	})
	return deleted, err
}

// SHA256 is what Record.SHA256 holds for cert: the SHA-256 of its DER in
// lowercase hex.
func SHA256(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// ErrAmbiguous: a serial number that more than one CA issued, asked for
// without naming the CA.
var ErrAmbiguous = errors.New("more than one CA issued this serial number")

func (r *Recorder) fpKey(sha256Hex string) string {
	return path.Join(r.fpPrefix, strings.ToLower(sha256Hex))
}

// BySHA256 returns the record of the certificate whose DER has this
// SHA-256 (hex, any case), through the index; false when rekey has no
// record of it (never issued by rekey, issued before records had SHA256,
// or its record is gone: expired, or its CA key destroyed).
func (r *Recorder) BySHA256(ctx context.Context, sha256Hex string) (Record, bool, error) {
	if _, err := hex.DecodeString(sha256Hex); err != nil || len(sha256Hex) != 2*sha256.Size {
		return Record{}, false, fmt.Errorf("%q is not a SHA-256 in hex", sha256Hex)
	}
	resp, err := r.client.Get(ctx, r.fpKey(sha256Hex))
	if err != nil {
		return Record{}, false, fmt.Errorf("reading the issuance index: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return Record{}, false, nil
	}
	caName, serial, ok := strings.Cut(string(resp.Kvs[0].Value), "/")
	if !ok {
		return Record{}, false, fmt.Errorf("issuance index key %s is corrupt", resp.Kvs[0].Key)
	}
	rec, found, err := r.get(ctx, caName, serial)
	if err != nil || !found {
		return Record{}, found, err
	}
	if !strings.EqualFold(rec.SHA256, sha256Hex) {
		// An index key left by a record deleted otherwise than by Prune.
		return Record{}, false, nil
	}
	return rec, true, nil
}

// BySerial returns the record of the certificate with this serial number
// (hex, any case, leading zeros allowed) that CA caName issued or, with
// caName "", that any CA issued (ErrAmbiguous when two did).
func (r *Recorder) BySerial(ctx context.Context, caName, serialHex string) (Record, bool, error) {
	serial, err := NormalizeSerial(serialHex)
	if err != nil {
		return Record{}, false, err
	}
	if strings.Contains(caName, "/") {
		// Not a CA name; it must not reach outside the CA's keys.
		return Record{}, false, nil
	}
	if caName != "" {
		return r.get(ctx, caName, serial)
	}
	// Every CA that ever recorded has a revision key: one small read
	// names them all.
	resp, err := r.client.Get(ctx, r.revPrefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return Record{}, false, fmt.Errorf("listing the CAs with issuance records: %w", err)
	}
	var found []Record
	for _, kv := range resp.Kvs {
		ca := strings.TrimPrefix(string(kv.Key), r.revPrefix+"/")
		rec, ok, err := r.get(ctx, ca, serial)
		if err != nil {
			return Record{}, false, err
		}
		if ok {
			found = append(found, rec)
		}
	}
	switch len(found) {
	case 0:
		return Record{}, false, nil
	case 1:
		return found[0], true, nil
	}
	return Record{}, false, fmt.Errorf("serial number %s: %w (CAs %s and %s); name the CA", serial, ErrAmbiguous, found[0].CAName, found[1].CAName)
}

// NormalizeSerial turns a hex serial number (any case, leading zeros, an
// optional 0x, colons between bytes as openssl prints them) into the form
// records are keyed by (lowercase, no leading zeros).
func NormalizeSerial(serialHex string) (string, error) {
	s := strings.ReplaceAll(strings.TrimPrefix(strings.TrimPrefix(serialHex, "0x"), "0X"), ":", "")
	n, ok := new(big.Int).SetString(s, 16)
	if !ok || s == "" || strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
		return "", fmt.Errorf("serial number %q is not hex", serialHex)
	}
	return fmt.Sprintf("%x", n), nil
}

// get reads the record of one CA and serial.
func (r *Recorder) get(ctx context.Context, caName, serial string) (Record, bool, error) {
	resp, err := r.client.Get(ctx, path.Join(r.prefix, caName, serial))
	if err != nil {
		return Record{}, false, fmt.Errorf("reading the issuance record of %s/%s: %w", caName, serial, err)
	}
	if len(resp.Kvs) == 0 {
		return Record{}, false, nil
	}
	var rec Record
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		return Record{}, false, fmt.Errorf("record %s is corrupt: %w", resp.Kvs[0].Key, err)
	}
	return rec, true, nil
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
