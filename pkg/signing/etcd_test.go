package signing_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/standalone"
)

// TestEtcdKeyStoreRefusesIDsOutsideItsPrefix: "../kek-check" once reached the
// key-encryption key check value, which decrypts, and the parse error then
// quoted the plaintext.
func TestEtcdKeyStoreRefusesIDsOutsideItsPrefix(t *testing.T) {
	ctx := context.Background()
	e, err := standalone.StartEtcd(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{e.ClientURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	kek, err := signing.NewKEK()
	if err != nil {
		t.Fatal(err)
	}
	store, err := signing.NewEtcdKeyStore(ctx, client, "/rekey.io-private", kek)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"../kek-check", "../cakeys/../kek-check", "x/../../kek-check"} {
		_, err := store.Get(ctx, id)
		if err == nil {
			t.Fatalf("Get(%q) succeeded", id)
		}
		if !strings.Contains(err.Error(), "invalid key ID") || strings.Contains(err.Error(), "rekey key-encryption key check") {
			t.Fatalf("Get(%q) error = %q", id, err)
		}
		if _, _, err := store.GetOrCreate(ctx, id, signing.ECDSAP256); err == nil {
			t.Fatalf("GetOrCreate(%q) succeeded", id)
		}
	}
	// A value under the key prefix that decrypts but is no CA key: the
	// error names the key, never the plaintext.
	if _, _, err := store.GetOrCreate(ctx, "good-1", signing.ECDSAP256); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, "good-1"); err != nil {
		t.Fatal(err)
	}
}
