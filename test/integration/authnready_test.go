package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"rekey.io/rekey/test/framework"
)

// TestAFreshReplicaAuthenticatesItsFirstRequests: the requests that reach
// a rekey-apiserver in the first moment it accepts connections are
// authenticated like any later one. Before the authentication gate, the
// client CA loaded from kube-system/extension-apiserver-authentication was
// missing until an informer's first sync, and a valid client certificate
// got 401 (seen in the end-to-end run of 2026-11-24). The replica joins
// the shared control plane as a follower, so it changes nothing there.
func TestAFreshReplicaAuthenticatesItsFirstRequests(t *testing.T) {
	t.Parallel()
	cluster := kubeCluster(t)
	admin, err := clientcmd.BuildConfigFromFlags("", cluster.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	port := framework.FreePort(t)
	replica, err := cluster.StartRekeyReplica(t.TempDir(), port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replica log tail:\n%s", replica.LogTail(4000))
		}
		replica.Stop(20 * time.Second)
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	framework.Eventually(t, time.Minute, "the replica accepting connections", func(context.Context) error {
		if replica.Exited() {
			return framework.Permanent(fmt.Errorf("the replica exited"))
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return conn.Close()
	})

	// At once, several at a time: the first moment is what is tested.
	client, err := rest.HTTPClientFor(cluster.DirectToRekeyAt(admin, port))
	if err != nil {
		t.Fatal(err)
	}
	const path = "/apis/certificates.rekey.io/v1alpha1/signers?limit=1"
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get(fmt.Sprintf("https://%s%s", addr, path))
			if err != nil {
				errs <- err
				return
			}
			defer func() { _ = resp.Body.Close() }()
			if resp.StatusCode != http.StatusOK {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				errs <- fmt.Errorf("%s: %s", resp.Status, body)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a first request with the admin's client certificate: %v", err)
	}
}
