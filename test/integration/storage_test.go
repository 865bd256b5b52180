package integration

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/test/framework"
)

// protobufMagic starts every object Kubernetes stores as protobuf.
var protobufMagic = []byte("k8s\x00")

func storedCSR(t *testing.T, etcd *clientv3.Client, name string) []byte {
	t.Helper()
	resp, err := etcd.Get(context.Background(), "/registry/rekey.io/certificates.rekey.io/certificatesigningrequests/"+name)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("%d etcd keys for %s, want 1", len(resp.Kvs), name)
	}
	return resp.Kvs[0].Value
}

// Objects are stored as protobuf by default; objects stored as JSON (by
// --storage-media-type=application/json, or an older rekey) stay readable
// and are rewritten as protobuf on their next update.
//
// Not parallel: framework.StartEtcd does not choose again when the ports
// it picked are taken before etcd listens (StartStandalone does), which
// tests starting beside it would make likelier.
func TestObjectsAreStoredAsProtobufAndJSONStillReads(t *testing.T) {
	ctx := context.Background()
	etcdURL, etcd := framework.StartEtcd(t)
	dir := t.TempDir()

	jsonServer := framework.StartStandalone(t, dir, "--etcd-servers="+etcdURL, "--storage-media-type=application/json")
	if _, err := jsonServer.Client.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, newCSR(t, "as-json", "example.com/signer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if v := storedCSR(t, etcd, "as-json"); !bytes.HasPrefix(v, []byte("{")) {
		t.Fatalf("with --storage-media-type=application/json the object is stored as %q...", v[:min(len(v), 8)])
	}
	jsonServer.Stop(t)

	srv := framework.StartStandalone(t, dir, "--etcd-servers="+etcdURL)
	csrs := srv.Client.CertificatesV1alpha1().CertificateSigningRequests()
	if _, err := csrs.Create(ctx, newCSR(t, "as-protobuf", "example.com/signer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if v := storedCSR(t, etcd, "as-protobuf"); !bytes.HasPrefix(v, protobufMagic) {
		t.Fatalf("object stored as %q..., want protobuf", v[:min(len(v), 8)])
	}
	old, err := csrs.Get(ctx, "as-json", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("object stored as JSON does not read: %v", err)
	}
	if old.Spec.SignerName != "example.com/signer" || len(old.Spec.Request) == 0 {
		t.Fatalf("object stored as JSON read back wrong: %+v", old.Spec)
	}
	addCondition(old, certv1alpha1.CertificateApproved, "AfterMigration")
	if _, err := csrs.UpdateApproval(ctx, "as-json", old, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if v := storedCSR(t, etcd, "as-json"); !bytes.HasPrefix(v, protobufMagic) {
		t.Fatalf("after an update the object is still stored as %q...", v[:min(len(v), 8)])
	}
}

// Watch-list streams (what informers open: the initial list as events, then
// the watch) are not gzipped unless the WatchListCompression gate is turned
// back on: events are small and flushed one at a time.
func TestWatchIsNotCompressedByDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--feature-gates=WatchListCompression=true"}, "gzip"},
	} {
		srv := framework.StartStandalone(t, t.TempDir(), tc.args...)
		httpClient, err := rest.HTTPClientFor(srv.Config)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodGet, srv.Config.Host+"/apis/certificates.rekey.io/v1alpha1/certificatesigningrequests?watch=true&timeoutSeconds=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%v: watch answered %s", tc.args, resp.Status)
		}
		if got := resp.Header.Get("Content-Encoding"); got != tc.want {
			t.Errorf("%v: watch Content-Encoding %q, want %q", tc.args, got, tc.want)
		}
		srv.Stop(t)
	}
}
