// Package issuance records every certificate rekey issues (serial, request,
// requester, signer, validity) in etcd under the private prefix, apart from
// the API objects, so that later work can list what a CA has issued
// (for re-issuance on rotation, or revocation).
package issuance

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"time"

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
	Subject    string    `json:"subject,omitempty"`
	SignerName string    `json:"signerName"`
	CAName     string    `json:"caName"`
	CAKeyID    string    `json:"caKeyID"`
	NotBefore  time.Time `json:"notBefore"`
	NotAfter   time.Time `json:"notAfter"`
}

// maxBatch bounds the records written in one etcd transaction (etcd allows
// 128 operations per transaction by default).
const maxBatch = 100

// Recorder writes and lists records. Concurrent Record calls are grouped
// into one etcd transaction (group commit): under load the signer pays one
// etcd round trip per batch instead of one per certificate, and an idle
// signer still writes at once.
type Recorder struct {
	client *clientv3.Client
	prefix string
	queue  chan *pending
}

type pending struct {
	key, value string
	done       chan error
}

// NewRecorder stores records under prefix/issued/<ca>/<serial> until ctx
// is done.
func NewRecorder(ctx context.Context, client *clientv3.Client, prefix string) *Recorder {
	r := &Recorder{client: client, prefix: path.Join(prefix, "issued"), queue: make(chan *pending, 4*maxBatch)}
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
	p := &pending{key: path.Join(r.prefix, rec.CAName, rec.Serial), value: string(data), done: make(chan error, 1)}
	select {
	case r.queue <- p:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-p.done:
		if err != nil {
			return fmt.Errorf("recording issuance of %s: %w", rec.Serial, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Recorder) flushLoop(ctx context.Context) {
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
		ops := make([]clientv3.Op, len(batch))
		for i, p := range batch {
			ops[i] = clientv3.OpPut(p.key, p.value)
		}
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := r.client.Txn(wctx).Then(ops...).Commit()
		cancel()
		for _, p := range batch {
			p.done <- err
		}
	}
}

// List returns every record of a CA.
func (r *Recorder) List(ctx context.Context, caName string) ([]Record, error) {
	resp, err := r.client.Get(ctx, path.Join(r.prefix, caName)+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var rec Record
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return nil, fmt.Errorf("record %s is corrupt: %w", kv.Key, err)
		}
		out = append(out, rec)
	}
	return out, nil
}
