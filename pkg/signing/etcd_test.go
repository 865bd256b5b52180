package signing_test

import (
	"context"
	"strings"
	"testing"

	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/test/etcdtest"
)

// TestEtcdKeyStoreRefusesIDsOutsideItsPrefix: "../kek-check" once reached the
// key-encryption key check value, which decrypts, and the parse error then
// quoted the plaintext.
func TestEtcdKeyStoreRefusesIDsOutsideItsPrefix(t *testing.T) {
	ctx := context.Background()
	client := etcdtest.Start(t)
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
