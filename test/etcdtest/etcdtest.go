// Package etcdtest runs a real etcd inside a unit test: the embedded etcd of
// standalone mode, in a temporary directory, gone when the test ends.
package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"rekey.io/rekey/pkg/standalone"
)

// Start returns a client of a fresh etcd.
func Start(t testing.TB) *clientv3.Client {
	t.Helper()
	e, err := standalone.StartEtcd(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{e.ClientURL}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}
