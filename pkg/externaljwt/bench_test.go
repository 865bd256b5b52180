package externaljwt

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	externaljwtv1 "k8s.io/externaljwt/apis/v1"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/jwtkey"
)

// benchSigner serves a Server whose Signer signs ES256 in memory on a Unix
// socket, as kube-apiserver dials it, and returns a client and claims to
// sign: what the socket, gRPC and the Server's checks add to a signature.
// rekey-agent jwt-signer adds its signjwt call to rekey-apiserver on top
// (test/bench -satokens measures that path end to end).
func benchSigner(b *testing.B) (externaljwtv1.ExternalJWTSignerClient, string) {
	b.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	kid, err := jwtkey.KeyID(&key.PublicKey)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := NewServer(&fakeSource{ks: keySet(kid, key)}, &localSigner{kid: kid, signer: key}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	// A short directory of its own: b.TempDir() can pass the 107 bytes a
	// socket path may have.
	dir, err := os.MkdirTemp("", "ejwt")
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "s.sock")
	lis, err := Listen(path, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	// Handlers log nothing at the default verbosity; a discarding logger
	// keeps the benchmark's output clean all the same.
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(1)))
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, lis, srv) }()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = conn.Close()
		cancel()
		if err := <-served; err != nil {
			b.Errorf("Serve: %v", err)
		}
		_ = os.RemoveAll(dir)
	})
	now := time.Now().Unix()
	raw, err := json.Marshal(map[string]any{
		"aud": []string{"https://kubernetes.default.svc"}, "exp": now + 3600, "iat": now, "nbf": now,
		"iss": "https://kubernetes.default.svc", "sub": "system:serviceaccount:default:app",
		"kubernetes.io": map[string]any{"namespace": "default", "serviceaccount": map[string]string{"name": "app", "uid": "1e2f3a4b-5c6d-4e7f-8a9b-0c1d2e3f4a5b"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	return externaljwtv1.NewExternalJWTSignerClient(conn), base64.RawURLEncoding.EncodeToString(raw)
}

// BenchmarkSignOverSocket is one Sign call, as kube-apiserver makes it per
// TokenRequest, through the Unix socket to a Server signing ES256 in
// memory, one call at a time; compare pkg/jwtkey's BenchmarkSign/ES256,
// the signature alone.
func BenchmarkSignOverSocket(b *testing.B) {
	client, claims := benchSigner(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := client.Sign(ctx, &externaljwtv1.SignJWTRequest{Claims: claims}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSignOverSocketParallel is BenchmarkSignOverSocket with 32 calls
// in flight per core on one connection, as a busy kube-apiserver makes
// them: signatures per second through the socket.
func BenchmarkSignOverSocketParallel(b *testing.B) {
	client, claims := benchSigner(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := client.Sign(ctx, &externaljwtv1.SignJWTRequest{Claims: claims}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
