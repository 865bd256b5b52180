// Package revocation keeps, on every replica, the set of certificates that
// are revoked (from an informer on Revocations) and enforces it: an
// authorization webhook for kube-apiserver (SubjectAccessReview v1: Deny for
// a request whose credential-id is a revoked certificate, NoOpinion
// otherwise, never Allow) and a wrapper that makes rekey's own
// authentication refuse revoked certificates. docs/revocation.md has the
// model and kube-apiserver's configuration.
package revocation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
)

// CredentialIDKey is the key of the user's extra under which kube-apiserver
// (since 1.32) and rekey's own certificate authenticators put the
// certificate's identity, and CredentialIDPrefix how that identity begins
// for a client certificate: X509SHA256=<hex SHA-256 of the leaf's DER>.
const (
	CredentialIDKey    = "authentication.kubernetes.io/credential-id"
	CredentialIDPrefix = "X509SHA256="
)

// Entry is one revoked certificate, as its Revocation's status records it:
// what the enforcement points say about it.
type Entry struct {
	SHA256         [32]byte
	Reason         certv1alpha1.RevocationReason
	RevocationTime time.Time
	NotAfter       time.Time
}

// packed is an Entry as the map holds it: without pointers (the reason is
// an index into reasons, the times Unix nanoseconds), so that the garbage
// collector never scans the map's buckets. With 100,000 revocations a map
// of pointers cost every GC cycle a walk of 100,000 objects and their
// strings, which showed in the webhook's latency tail.
type packed struct {
	reason             uint8
	revokedAt, expires int64
}

// reasons are the RFC 5280 reasons by packed index; index 0 is
// Unspecified, which is also what an unknown reason is kept as.
var reasons = []certv1alpha1.RevocationReason{
	certv1alpha1.RevocationReasonUnspecified,
	certv1alpha1.RevocationReasonKeyCompromise,
	certv1alpha1.RevocationReasonCACompromise,
	certv1alpha1.RevocationReasonAffiliationChanged,
	certv1alpha1.RevocationReasonSuperseded,
	certv1alpha1.RevocationReasonCessationOfOperation,
	certv1alpha1.RevocationReasonPrivilegeWithdrawn,
	certv1alpha1.RevocationReasonAACompromise,
}

func pack(e *Entry) packed {
	p := packed{revokedAt: unixNano(e.RevocationTime), expires: unixNano(e.NotAfter)}
	for i, r := range reasons {
		if r == e.Reason {
			p.reason = uint8(i)
		}
	}
	return p
}

func (p packed) entry(sum [32]byte) Entry {
	e := Entry{SHA256: sum, Reason: reasons[p.reason]}
	if p.revokedAt != 0 {
		e.RevocationTime = time.Unix(0, p.revokedAt).UTC()
	}
	if p.expires != 0 {
		e.NotAfter = time.Unix(0, p.expires).UTC()
	}
	return e
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// Set is the revoked certificates, keyed by SHA-256. Lookups take a read
// lock on one map: O(1), no allocation. It is filled by Watch; until the
// informer has synced, HasSynced is false and the enforcement points say
// they do not know (the webhook answers 503, the authenticator waits).
type Set struct {
	mu      sync.RWMutex
	entries map[[32]byte]packed

	synced atomic.Pointer[func() bool]
	// syncedOnce is closed when HasSynced first returns true (WaitForSync).
	syncedOnce chan struct{}
	closeOnce  sync.Once

	listenersMu sync.Mutex
	listeners   []chan<- struct{}
}

// NewSet returns an empty set that has not synced, and registers the
// package's metrics (before any watch can update them: component-base
// initializes a metric when it is registered).
func NewSet() *Set {
	RegisterMetrics()
	return &Set{entries: map[[32]byte]packed{}, syncedOnce: make(chan struct{})}
}

// Watch fills the set from informer (the replica's Revocations informer)
// and keeps it current; HasSynced follows the handler's registration. Call
// it once, before the informer factory starts.
func (s *Set) Watch(informer cache.SharedIndexInformer) error {
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.put(obj) },
		UpdateFunc: func(_, obj any) { s.put(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			s.remove(obj)
		},
	})
	if err != nil {
		return fmt.Errorf("watching Revocations: %w", err)
	}
	hasSynced := reg.HasSynced
	s.synced.Store(&hasSynced)
	return nil
}

// HasSynced says whether the set holds every Revocation that existed when
// its informer started (and what came since).
func (s *Set) HasSynced() bool {
	if s == nil {
		return false
	}
	select {
	case <-s.syncedOnce:
		return true
	default:
	}
	f := s.synced.Load()
	if f == nil || !(*f)() {
		return false
	}
	s.closeOnce.Do(func() { close(s.syncedOnce) })
	return true
}

// WaitForSync waits until the set has synced or ctx ends; it says which.
func (s *Set) WaitForSync(ctx context.Context) bool {
	if s.HasSynced() {
		return true
	}
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-ticker.C:
			if s.HasSynced() {
				return true
			}
		}
	}
}

// Lookup returns the revocation of the certificate whose DER has SHA-256
// sum.
func (s *Set) Lookup(sum [32]byte) (Entry, bool) {
	s.mu.RLock()
	p, ok := s.entries[sum]
	s.mu.RUnlock()
	if !ok {
		return Entry{}, false
	}
	return p.entry(sum), true
}

// LookupCredentialID returns the revocation of the certificate a
// credential-id (X509SHA256=<hex>) names; false for any other credential
// (a JWT's JTI=..., a malformed value) or one not revoked.
func (s *Set) LookupCredentialID(id string) (Entry, bool) {
	sum, ok := ParseCredentialID(id)
	if !ok {
		return Entry{}, false
	}
	return s.Lookup(sum)
}

// ParseCredentialID parses X509SHA256=<64 hex digits> (either case)
// without allocating.
func ParseCredentialID(id string) ([32]byte, bool) {
	var sum [32]byte
	if len(id) != len(CredentialIDPrefix)+2*sha256.Size || id[:len(CredentialIDPrefix)] != CredentialIDPrefix {
		return sum, false
	}
	return parseHex(id[len(CredentialIDPrefix):])
}

// parseHex parses 64 hex digits (either case) into a SHA-256.
func parseHex(h string) ([32]byte, bool) {
	var sum [32]byte
	if len(h) != 2*sha256.Size {
		return sum, false
	}
	for i := range sum {
		hi, ok1 := unhex(h[2*i])
		lo, ok2 := unhex(h[2*i+1])
		if !ok1 || !ok2 {
			return sum, false
		}
		sum[i] = hi<<4 | lo
	}
	return sum, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Len is how many certificates are revoked.
func (s *Set) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.entries)
}

// Range calls f for every entry (in no order) until f returns false. The
// set is read-locked meanwhile: f must not call back into the set.
func (s *Set) Range(f func(Entry) bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for sum, p := range s.entries {
		if !f(p.entry(sum)) {
			return
		}
	}
}

// Notify sends on ch (without blocking: a full channel already has news)
// after every change to the set. Give it a buffered channel of size 1.
func (s *Set) Notify(ch chan<- struct{}) {
	s.listenersMu.Lock()
	defer s.listenersMu.Unlock()
	s.listeners = append(s.listeners, ch)
}

func (s *Set) changed() {
	s.listenersMu.Lock()
	defer s.listenersMu.Unlock()
	for _, ch := range s.listeners {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// entryOf reads a Revocation; false when it names no certificate the set
// can key (the server always sets both name and status, so this is a
// Revocation stored by something else).
func entryOf(r *certv1alpha1.Revocation) (*Entry, bool) {
	sum, ok := parseHex(r.Status.CertificateSHA256)
	if !ok {
		if sum, ok = parseHex(r.Name); !ok {
			return nil, false
		}
	}
	reason := r.Spec.Reason
	if reason == "" {
		reason = certv1alpha1.RevocationReasonUnspecified
	}
	return &Entry{
		SHA256:         sum,
		Reason:         reason,
		RevocationTime: r.Status.RevocationTime.Time,
		NotAfter:       r.Status.NotAfter.Time,
	}, true
}

func (s *Set) put(obj any) {
	r, ok := obj.(*certv1alpha1.Revocation)
	if !ok {
		return
	}
	e, ok := entryOf(r)
	if !ok {
		klog.Background().V(2).Info("Ignoring a Revocation that names no SHA-256", "revocation", r.Name)
		return
	}
	s.mu.Lock()
	s.entries[e.SHA256] = pack(e)
	n := len(s.entries)
	s.mu.Unlock()
	revokedCertificates.Set(float64(n))
	s.changed()
}

func (s *Set) remove(obj any) {
	r, ok := obj.(*certv1alpha1.Revocation)
	if !ok {
		return
	}
	e, ok := entryOf(r)
	if !ok {
		return
	}
	s.mu.Lock()
	delete(s.entries, e.SHA256)
	n := len(s.entries)
	s.mu.Unlock()
	revokedCertificates.Set(float64(n))
	s.changed()
}

// Hex is the lowercase hex of a SHA-256, as Revocations are named.
func Hex(sum [32]byte) string { return hex.EncodeToString(sum[:]) }
