package certificateauthority

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/jwtkey"
	"rekey.io/rekey/pkg/signing"
)

// twoViews is CertificateAuthority storage whose watch cache (resourceVersion
// "0") and etcd (a quorum read: no resourceVersion) may answer differently:
// a replica whose watch has stalled while etcd is reachable.
type twoViews struct {
	mu            sync.Mutex
	watch, quorum *rotation.CertificateAuthority
	quorumErr     error
	quorumReads   int
	// release, when set, holds each quorum read until it is closed.
	release chan struct{}
}

func (f *twoViews) Get(_ context.Context, _ string, opts *metav1.GetOptions) (runtime.Object, error) {
	f.mu.Lock()
	if opts != nil && opts.ResourceVersion == "0" {
		defer f.mu.Unlock()
		return f.watch.DeepCopy(), nil
	}
	if opts == nil || opts.ResourceVersion != "" {
		f.mu.Unlock()
		return nil, errors.New("the test store serves resourceVersion 0 or a quorum read only")
	}
	f.quorumReads++
	release := f.release
	f.mu.Unlock()
	if release != nil {
		<-release
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.quorumErr != nil {
		return nil, f.quorumErr
	}
	return f.quorum.DeepCopy(), nil
}

func (f *twoViews) set(fn func(*twoViews)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *twoViews) reads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.quorumReads
}

// rotationViews are a Ready ServiceAccountTokens CA while oldKey is being
// replaced by newKey: Preparing (old signs) and Prepared (old is previous).
func rotationViews(t *testing.T, oldKey, newKey *authority.Authority) (preparing, prepared *rotation.CertificateAuthority) {
	t.Helper()
	entry := func(a *authority.Authority) *rotation.CACertificate {
		kid, err := jwtkey.KeyID(a.Cert.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		return &rotation.CACertificate{Fingerprint: signing.Fingerprint(a.Cert), TokenKeyID: kid}
	}
	preparing = saCA("sa")
	preparing.UID = "uid-1"
	preparing.Status.Phase, preparing.Status.Current, preparing.Status.Next = rotation.PhasePreparing, entry(oldKey), entry(newKey)
	prepared = saCA("sa")
	prepared.UID = "uid-1"
	prepared.Status.Phase, prepared.Status.Current, prepared.Status.Previous = rotation.PhasePrepared, entry(newKey), entry(oldKey)
	return preparing, prepared
}

func kidOf(t *testing.T, a *authority.Authority) string {
	t.Helper()
	kid, err := jwtkey.KeyID(a.Cert.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return kid
}

// signAt asks r for a signature at the fake clock's now: the kid, or the
// error.
func signAt(t *testing.T, r *SignJWTREST, clk *clocktesting.FakePassiveClock, at time.Time) (string, error) {
	t.Helper()
	clk.SetTime(at)
	now := at.Unix()
	obj, err := r.Create(context.Background(), "sa", &rotation.JWTSignRequest{Claims: claimsOf(t, kubeClaims(now, now+3600))}, nil, &metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return obj.(*rotation.JWTSignRequest).KeyID, nil
}

// TestSignJWTBoundsAStaleWatchCache (review REVIEW33b finding A): this
// replica's watch of CertificateAuthorities has stalled at Preparing (old
// key current) while etcd holds Prepared (old key previous). The old key
// signs for at most quorumReadEvery (jwtkey.ReplicaLag/2) after this
// replica's last quorum read, and each token costs no quorum read while
// that read is fresh.
func TestSignJWTBoundsAStaleWatchCache(t *testing.T) {
	oldKey, newKey := newAuthority(t), newAuthority(t)
	preparing, prepared := rotationViews(t, oldKey, newKey)
	if quorumReadEvery != 30*time.Second || quorumReadEvery+quorumReadTimeout >= jwtkey.ReplicaLag {
		t.Fatalf("quorumReadEvery %s + quorumReadTimeout %s must stay within jwtkey.ReplicaLag %s", quorumReadEvery, quorumReadTimeout, jwtkey.ReplicaLag)
	}

	for _, tc := range []struct {
		name     string
		promoted bool  // the binding names the new key by then
		readErr  error // the quorum read at +30s fails
		want     string
	}{
		{name: "binding promoted: the new key signs", promoted: true},
		{name: "binding read still old: 503", want: "this replica's key cache is behind"},
		{name: "quorum read fails: 503", promoted: true, readErr: errors.New("etcdserver: request timed out"), want: "could not confirm its current key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &twoViews{watch: preparing, quorum: preparing}
			keys := &cacheKeys{cached: oldKey, fresh: oldKey}
			clk := clocktesting.NewFakePassiveClock(signNow)
			r := NewSignJWTREST(store, keys, clk)

			// Preparing everywhere: the old key signs, after one quorum read.
			if kid, err := signAt(t, r, clk, signNow); err != nil || kid != kidOf(t, oldKey) {
				t.Fatalf("Preparing: kid %s, %v; want the old key's", kid, err)
			}
			// Prepared is committed; this replica's watch stays at Preparing.
			store.set(func(s *twoViews) { s.quorum = prepared })
			if tc.promoted {
				keys.fresh = newKey
			}
			// Within the bound the old key still signs, at no quorum read
			// per token.
			for _, after := range []time.Duration{time.Second, 10 * time.Second, 29 * time.Second} {
				if kid, err := signAt(t, r, clk, signNow.Add(after)); err != nil || kid != kidOf(t, oldKey) {
					t.Fatalf("+%s: kid %s, %v; want the old key's (within the bound)", after, kid, err)
				}
			}
			within := store.reads()
			store.set(func(s *twoViews) { s.quorumErr = tc.readErr })
			// quorumReadEvery after the last quorum read, the old key no
			// longer signs: nor at any later time.
			for _, after := range []time.Duration{30 * time.Second, 40 * time.Second, 65 * time.Second, 10 * time.Minute} {
				kid, err := signAt(t, r, clk, signNow.Add(after))
				if tc.want == "" {
					if err != nil || kid != kidOf(t, newKey) {
						t.Fatalf("+%s: kid %s, %v; want the new key's", after, kid, err)
					}
					continue
				}
				if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("+%s: kid %s, %v; want a 503 containing %q", after, kid, err, tc.want)
				}
			}
			if within != 1 {
				t.Fatalf("%d quorum reads for 4 tokens within %s, want 1", within, quorumReadEvery)
			}
			if tc.want == "" {
				// +30s, +65s, +10m; +40s judged by the read at +30s.
				if n := store.reads(); n != 4 {
					t.Fatalf("%d quorum reads, want 4", n)
				}
			}
		})
	}
}

// A replica that has made no quorum read of the CA yet does not sign on
// its watch cache alone.
func TestSignJWTFirstTokenReadsQuorum(t *testing.T) {
	oldKey, newKey := newAuthority(t), newAuthority(t)
	preparing, prepared := rotationViews(t, oldKey, newKey)
	store := &twoViews{watch: preparing, quorum: prepared}
	keys := &cacheKeys{cached: oldKey, fresh: newKey}
	clk := clocktesting.NewFakePassiveClock(signNow)
	r := NewSignJWTREST(store, keys, clk)
	if kid, err := signAt(t, r, clk, signNow); err != nil || kid != kidOf(t, newKey) {
		t.Fatalf("kid %s, %v; want the new key's", kid, err)
	}
	if n, f := store.reads(), keys.forgets; n != 1 || f != 1 {
		t.Fatalf("%d quorum reads, %d Forgets; want 1 and 1", n, f)
	}
}

// When the views disagree about a key, a quorum read begun after the
// watch-cache read decides, even if the last one is fresh: here the watch
// cache saw Prepared before this replica's last quorum read (still
// Preparing) expired.
func TestSignJWTViewsDisagree(t *testing.T) {
	oldKey, newKey := newAuthority(t), newAuthority(t)
	preparing, prepared := rotationViews(t, oldKey, newKey)
	store := &twoViews{watch: preparing, quorum: preparing}
	keys := &cacheKeys{cached: oldKey, fresh: oldKey}
	clk := clocktesting.NewFakePassiveClock(signNow)
	r := NewSignJWTREST(store, keys, clk)
	if kid, err := signAt(t, r, clk, signNow); err != nil || kid != kidOf(t, oldKey) {
		t.Fatalf("Preparing: kid %s, %v", kid, err)
	}
	store.set(func(s *twoViews) { s.watch, s.quorum = prepared, prepared })
	keys.fresh = newKey
	if kid, err := signAt(t, r, clk, signNow.Add(5*time.Second)); err != nil || kid != kidOf(t, newKey) {
		t.Fatalf("Prepared: kid %s, %v; want the new key's", kid, err)
	}
	if n := store.reads(); n != 2 {
		t.Fatalf("%d quorum reads, want 2 (the first token, the disagreement at +5s)", n)
	}
	// The read at +5s is remembered: a watch cache behind it (stalled at
	// Preparing) and a key cache still answering the old key do not bring
	// the old key back; the disagreement is settled by another read.
	store.set(func(s *twoViews) { s.watch = preparing })
	keys.cached = oldKey
	if kid, err := signAt(t, r, clk, signNow.Add(10*time.Second)); err != nil || kid != kidOf(t, newKey) {
		t.Fatalf("watch behind the remembered read: kid %s, %v; want the new key's", kid, err)
	}
	// The new key: the watch cache calls it next, the read current; they
	// agree, and no read is made.
	if kid, err := signAt(t, r, clk, signNow.Add(12*time.Second)); err != nil || kid != kidOf(t, newKey) {
		t.Fatalf("+12s: kid %s, %v; want the new key's", kid, err)
	}
	if n := store.reads(); n != 3 {
		t.Fatalf("%d quorum reads, want 3 (the first token, the disagreements at +5s and +10s)", n)
	}
}

// Concurrent signers share one quorum read per CA.
func TestSignJWTQuorumReadIsShared(t *testing.T) {
	oldKey, newKey := newAuthority(t), newAuthority(t)
	preparing, _ := rotationViews(t, oldKey, newKey)
	release := make(chan struct{})
	store := &twoViews{watch: preparing, quorum: preparing, release: release}
	clk := clocktesting.NewFakePassiveClock(signNow)
	r := NewSignJWTREST(store, fakeKeys{auth: oldKey}, clk)
	const n = 8
	var waiting atomic.Int32
	allWaiting := make(chan struct{})
	r.quorum.onWait = func() {
		if waiting.Add(1) == n-1 {
			close(allWaiting)
		}
	}
	now := signNow.Unix()
	claims := claimsOf(t, kubeClaims(now, now+3600))
	errs := make(chan error, n)
	for range n {
		go func() {
			obj, err := r.Create(context.Background(), "sa", &rotation.JWTSignRequest{Claims: claims}, nil, &metav1.CreateOptions{})
			if err == nil && obj.(*rotation.JWTSignRequest).KeyID != kidOf(t, oldKey) {
				err = errors.New("signed with another key")
			}
			errs <- err
		}()
	}
	select {
	case <-allWaiting:
	case <-time.After(10 * time.Second):
		t.Fatalf("only %d signers wait for the quorum read in progress", waiting.Load())
	}
	close(release)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := store.reads(); got != 1 {
		t.Fatalf("%d quorum reads for %d concurrent signers, want 1", got, n)
	}
}
