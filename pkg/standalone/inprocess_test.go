package standalone

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage"
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"
)

// TestInProcessClient: the in-process client reads, writes and watches
// the embedded etcd, answers progress requests, and makes the feature
// checker know that it does (the watch cache's consistent reads need it).
func TestInProcessClient(t *testing.T) {
	ctx := context.Background()
	e, err := StartEtcd(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c := e.InProcess().Client()
	if e.InProcess().Client() != c {
		t.Fatal("a second in-process client")
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := c.Watch(wctx, "/a/", clientv3.WithPrefix(), clientv3.WithProgressNotify())
	put, err := c.Put(ctx, "/a/x", "1")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-events:
		if len(resp.Events) != 1 || string(resp.Events[0].Kv.Value) != "1" || resp.Header.Revision != put.Header.Revision {
			t.Fatalf("watch: %+v", resp)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event")
	}
	if err := c.RequestProgress(wctx); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-events:
		if !resp.IsProgressNotify() {
			t.Fatalf("want a progress notification, got %+v", resp)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no progress notification")
	}
	if got, err := c.Get(ctx, "/a/x"); err != nil || len(got.Kvs) != 1 {
		t.Fatalf("get: %v %+v", err, got)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return etcdfeature.DefaultFeatureSupportChecker.Supports(storage.RequestWatchProgress), nil
	})
	if err != nil {
		t.Fatal("the feature checker does not know that the in-process client answers progress requests")
	}
}
