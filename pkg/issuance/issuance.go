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
	Serial     string    `json:"serial"`
	CSRName    string    `json:"csrName"`
	CSRUID     string    `json:"csrUID"`
	Requester  string    `json:"requester"`
	SignerName string    `json:"signerName"`
	CAName     string    `json:"caName"`
	CAKeyID    string    `json:"caKeyID"`
	NotBefore  time.Time `json:"notBefore"`
	NotAfter   time.Time `json:"notAfter"`
}

// Recorder writes and lists records.
type Recorder struct {
	client *clientv3.Client
	prefix string
}

// NewRecorder stores records under prefix/issued/<ca>/<serial>.
func NewRecorder(client *clientv3.Client, prefix string) *Recorder {
	return &Recorder{client: client, prefix: path.Join(prefix, "issued")}
}

// Record stores one record. It is written before the certificate is
// published, so no published certificate is ever missing from the record.
func (r *Recorder) Record(ctx context.Context, rec Record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if _, err := r.client.Put(ctx, path.Join(r.prefix, rec.CAName, rec.Serial), string(data)); err != nil {
		return fmt.Errorf("recording issuance of %s: %w", rec.Serial, err)
	}
	return nil
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
