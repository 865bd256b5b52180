package revocation

// Benchmarks for issue #31's targets: the webhook's decision latency over
// real HTTP at kube-apiserver's rate, and the memory of 100,000 revoked
// certificates. docs/benchmarks.md (Revocation) has the recorded run.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
)

const (
	// benchRevoked is how many certificates the benchmarks hold revoked.
	benchRevoked = 100000
	// benchRate is the decisions a second the webhook benchmark offers.
	benchRate = 2000
	// benchDenyEvery: one request in benchDenyEvery is made with a revoked
	// certificate (Deny); the others with certificates that are not
	// (NoOpinion), as in a cluster where revoked certificates are rare.
	benchDenyEvery = 100
)

var benchEpoch = time.Date(2026, 11, 24, 19, 0, 0, 0, time.UTC)

// benchSHA256 is the i-th certificate's SHA-256 (i >= benchRevoked: never
// revoked).
func benchSHA256(i int) [32]byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(i))
	return sha256.Sum256(b[:])
}

// benchRevocationObject is a Revocation as the informer holds it: every
// field the server fills, strings of a real one's lengths (a 20-byte
// serial, a subject, a request name and UID), no managed fields, and
// decoded (every string its own allocation, as a watch event's are).
func benchRevocationObject(tb testing.TB, i int) *certv1alpha1.Revocation {
	data, err := json.Marshal(benchRevocationLiteral(i))
	if err != nil {
		tb.Fatal(err)
	}
	r := &certv1alpha1.Revocation{}
	if err := json.Unmarshal(data, r); err != nil {
		tb.Fatal(err)
	}
	return r
}

func benchRevocationLiteral(i int) *certv1alpha1.Revocation {
	h := Hex(benchSHA256(i))
	serial := Hex(benchSHA256(-i - 1))[:40]
	return &certv1alpha1.Revocation{
		ObjectMeta: metav1.ObjectMeta{
			Name: h, UID: types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)),
			ResourceVersion: fmt.Sprint(1000000 + i), CreationTimestamp: metav1.NewTime(benchEpoch),
		},
		Spec: certv1alpha1.RevocationSpec{CertificateSHA256: h, Reason: certv1alpha1.RevocationReasonKeyCompromise},
		Status: certv1alpha1.RevocationStatus{
			CertificateSHA256: h, SerialNumber: serial,
			SignerName: "rekey.io/kube-apiserver-client", CAName: "rekey.io-kube-apiserver-client", CAKeyID: "3f2a9c0e4b7d1a6e",
			Subject:   fmt.Sprintf("CN=user-%d,O=team-%d", i, i%100),
			Requester: fmt.Sprintf("user-%d", i), Request: fmt.Sprintf("user-%d-client-20261124", i),
			RequestUID:     fmt.Sprintf("%08x-1111-4000-8000-%012x", i, i),
			NotAfter:       metav1.NewTime(benchEpoch.Add(24 * time.Hour)),
			RevocationTime: metav1.NewTime(benchEpoch), RevokedBy: "admin",
		},
	}
}

// benchSet is a synced set of n revoked certificates, filled as the
// informer fills it (put, one Revocation at a time); keep, when set, is
// given each object as the informer's store would keep it.
func benchSet(tb testing.TB, n int, keep func(*certv1alpha1.Revocation)) *Set {
	set := NewSet()
	for i := range n {
		r := benchRevocationObject(tb, i)
		set.put(r)
		if keep != nil {
			keep(r)
		}
	}
	synced := func() bool { return true }
	set.synced.Store(&synced)
	return set
}

// benchReview is a SubjectAccessReview as kube-apiserver sends it for a
// client certificate's GET of a ConfigMap.
func benchReview(tb testing.TB, i int) []byte {
	b, err := json.Marshal(&authorizationv1.SubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"},
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: fmt.Sprintf("user-%d", i), Groups: []string{"team", "system:authenticated"},
			Extra: map[string]authorizationv1.ExtraValue{CredentialIDKey: {CredentialIDPrefix + Hex(benchSHA256(i))}},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: "default", Verb: "get", Version: "v1", Resource: "configmaps", Name: "app",
			},
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// benchWebhookSet is made once: the benchmark function runs several
// times (b.N growing) and the set does not change.
var benchWebhookSet struct {
	once sync.Once
	set  *Set
}

// BenchmarkWebhookDecisionHTTP offers the webhook 2,000 decisions a second
// with 100,000 certificates revoked, over TLS and HTTP/2 on one kept-alive
// connection as kube-apiserver's webhook client sends them, open loop:
// request i is sent at start + i/2000 s whether or not earlier ones have
// been answered, and its latency runs from that scheduled time to the end
// of the answer, so a stall counts for every request it delays. One
// operation is one decision (ns/op is the pacing, 500 µs); the latencies
// are the p50-µs, p99-µs and max-µs metrics. Those include the load
// generator's own lateness (a sleep here overshoots by about half a
// millisecond); sent-p50-µs, sent-p99-µs and sent-max-µs run from the
// request's start instead, which is what kube-apiserver's client waits.
// Run it for 5 s with -benchtime 10000x.
func BenchmarkWebhookDecisionHTTP(b *testing.B) {
	benchWebhookSet.once.Do(func() { benchWebhookSet.set = benchSet(b, benchRevoked, nil) })
	set := benchWebhookSet.set
	srv := httptest.NewUnstartedServer(NewWebhook(set))
	srv.EnableHTTP2 = true
	// A connection the client opens beyond the first (it does when the
	// server's stream limit is reached) is closed in its handshake when the
	// benchmark ends: not worth a log line each.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	client := srv.Client()

	// Request bodies: every benchDenyEvery-th from a revoked certificate.
	const distinct = 1000
	bodies := make([][]byte, distinct)
	denied := make([]bool, distinct)
	for i := range bodies {
		id := benchRevoked + i
		if i%benchDenyEvery == 0 {
			id, denied[i] = i*97, true
		}
		bodies[i] = benchReview(b, id)
	}
	decide := func(i int) error {
		req, err := http.NewRequest(http.MethodPost, srv.URL+Path, bytes.NewReader(bodies[i%distinct]))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close() // read to the end
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			return fmt.Errorf("%s %d: %s", resp.Proto, resp.StatusCode, body)
		}
		if got := bytes.Contains(body, []byte(`"denied":true`)); got != denied[i%distinct] {
			return fmt.Errorf("request %d: denied %v, want %v: %s", i, got, denied[i%distinct], body)
		}
		return nil
	}
	// Warm: the connection, the server's goroutines and pools.
	for i := range 500 {
		if err := decide(i); err != nil {
			b.Fatal(err)
		}
	}

	lat := make([]time.Duration, b.N)
	// sent is from the request's start (its goroutine running) to the end
	// of the answer: lat less the load generator's own lateness.
	sent := make([]time.Duration, b.N)
	var failures atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	interval := time.Second / benchRate
	runtime.GC()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			if err := decide(i); err != nil {
				failures.Add(1)
				firstErr.CompareAndSwap(nil, &err)
			}
			lat[i], sent[i] = time.Since(at), time.Since(t0)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failures.Load(); n > 0 {
		b.Fatalf("%d of %d decisions failed, the first: %v", n, b.N, *firstErr.Load())
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"", lat}, {"sent-", sent}} {
		sort.Slice(m.d, func(i, j int) bool { return m.d[i] < m.d[j] })
		b.ReportMetric(us(m.d[len(m.d)/2]), m.name+"p50-µs")
		b.ReportMetric(us(m.d[(len(m.d)-1)*99/100]), m.name+"p99-µs")
		b.ReportMetric(us(m.d[len(m.d)-1]), m.name+"max-µs")
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(set.Len()), "revoked")
}

// BenchmarkRevokedSetMemory is the live heap that 100,000 revoked
// certificates take (after a collection, before and after filling):
// set, the revoked set alone (what the webhook, rekey's authentication
// and the CRLs read); set+informer-cache, with the Revocation objects a
// replica's informer keeps beside it (its store, namespace-indexed as
// the shared informer factories index). bytes/entry and MiB per 100,000;
// ns/op means nothing here.
func BenchmarkRevokedSetMemory(b *testing.B) {
	for _, withCache := range []bool{false, true} {
		name := "set"
		if withCache {
			name = "set+informer-cache"
		}
		b.Run(name, func(b *testing.B) {
			// One measurement whatever b.N (filling takes seconds, and a
			// -benchtime meant for the webhook benchmark would repeat it
			// thousands of times); the loop only satisfies the framework.
			var store cache.Indexer
			var keep func(*certv1alpha1.Revocation)
			if withCache {
				store = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
				keep = func(r *certv1alpha1.Revocation) {
					if err := store.Add(r); err != nil {
						b.Fatal(err)
					}
				}
			}
			before := liveHeap()
			set := benchSet(b, benchRevoked, keep)
			after := liveHeap()
			runtime.KeepAlive(set)
			runtime.KeepAlive(store)
			if set.Len() != benchRevoked {
				b.Fatalf("%d entries, want %d", set.Len(), benchRevoked)
			}
			for range b.N {
			}
			grown := float64(after) - float64(before)
			b.ReportMetric(grown/benchRevoked, "bytes/entry")
			b.ReportMetric(grown/(1<<20), "MiB/100k")
		})
	}
}

// liveHeap is the heap in use after two collections (the second frees
// what finalizers of the first released).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
