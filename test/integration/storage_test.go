package integration

import (
	"bytes"
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
