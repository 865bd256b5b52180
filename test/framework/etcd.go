package framework

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// StartEtcd runs the etcd built by hack/build-tools.sh on loopback until the
// test ends, and returns its client URL and a client.
func StartEtcd(t testing.TB) (string, *clientv3.Client) {
	t.Helper()
	toolsDir, err := BuildTools("etcd")
	if err != nil {
		t.Fatal(err)
	}
	ports, err := FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	url := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	p, err := Start(dir, "etcd", filepath.Join(toolsDir, "etcd"),
		"--name=t", "--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls="+url, "--advertise-client-urls="+url,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=t="+peer, "--log-level=warn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(10 * time.Second) })
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	if err := waitFor(30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := client.Get(ctx, "health")
		return err
	}); err != nil {
		t.Fatalf("etcd not ready: %v\n%s", err, p.LogTail(2000))
	}
	return url, client
}

// RunToExit runs rekey-apiserver with args and waits up to timeout for it to
// exit, returning its output and exit error. It fails the test if the
// process is still running at the deadline.
func RunToExit(t testing.TB, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, Binary(t, "rekey-apiserver"), args...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("rekey-apiserver %v still running after %s:\n%s", args, timeout, out)
	}
	return string(out), err
}
