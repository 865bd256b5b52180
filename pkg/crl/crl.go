// Package crl issues, on every replica, the certificate revocation list of
// each CertificateAuthority key from the replica's cache of Revocations,
// signs it with that key through the CA-key service (pkg/authority), keeps
// it in memory and serves it without credentials (Handler): GET
// /crl/<caName> is the CRL of the CA's current key, /crl/<caName>/<keyID>
// that of its current or previous key.
//
// A CRL lists the unexpired certificates whose Revocation names the CA and
// key (status.caName, status.caKeyID), each with its serial number,
// revocation time and RFC 5280 reason code (none for Unspecified). Its CRL
// number is the issue time in milliseconds, kept strictly increasing in
// the process, so that CRLs from different replicas compare by age without
// coordination. thisUpdate is the issue time less Backdate (clock skew of
// relying parties), nextUpdate the issue time plus the validity
// (--crl-validity). A CRL is issued when first asked for, again once the
// revocations of its key change (changes within Debounce, or twice the
// last issue's time when that is longer, coalesce into one issue) and
// once half its validity has passed, so that relying parties
// never hold an expired one.
package crl

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/runner"
)

const (
	// DefaultValidity is how long a CRL is valid (nextUpdate - issue
	// time) by default.
	DefaultValidity = 24 * time.Hour
	// MinValidity is the shortest validity: a CRL is re-issued at half of
	// it, and a relying party needs time to fetch the next one.
	MinValidity = 2 * time.Minute
	// Debounce is how long a change of a key's revocations waits for more
	// before the CRL is issued again: a burst of revocations costs one
	// signature.
	Debounce = 100 * time.Millisecond
	// Backdate is how far before the issue time thisUpdate lies, for
	// relying parties whose clocks are behind (a CRL whose thisUpdate is in
	// the future is "not yet valid" to OpenSSL).
	Backdate = 30 * time.Second
	// retryAfter is when an issue that failed (the key store unreachable)
	// is tried again.
	retryAfter = 10 * time.Second
)

// Errors of Get and Current.
var (
	// ErrNotFound: the CA does not exist, has no key yet, or no key of
	// that ID (any more).
	ErrNotFound = errors.New("no such CertificateAuthority key")
	// ErrNotReady: the replica's cache of Revocations is not complete
	// yet; a CRL made now could miss revocations.
	ErrNotReady = errors.New("the revocations are not loaded yet")
)

// Keys finds the keys that sign CRLs (authority.Authorities).
type Keys interface {
	// KeyIDs returns the CA's current key ID and its previous one ("" for
	// none) from a cache; an error wrapping authority.ErrNoSuchKey for a
	// CA that does not exist or has no key.
	KeyIDs(caName string) (current, previous string, err error)
	// KeyByID returns the key and certificate of one of them.
	KeyByID(ctx context.Context, caName, keyID string) (*authority.Authority, error)
}

var _ Keys = &authority.Authorities{}

// CRL is one issued CRL.
type CRL struct {
	// DER is the CRL.
	DER []byte
	// CAName and KeyID name the key that signed it.
	CAName, KeyID string
	// Number is its CRL number (the issue time in milliseconds, or one
	// more than the last number this process issued).
	Number *big.Int
	// Issued is when it was made; ThisUpdate is Backdate earlier,
	// NextUpdate Issued plus the validity.
	Issued, ThisUpdate, NextUpdate time.Time
	// Entries is how many certificates it lists.
	Entries int
	// ETag identifies its bytes (a quoted prefix of their SHA-256).
	ETag string
}

// Config is what a Manager is built from.
type Config struct {
	// Keys finds the signing keys: the server's authority.Authorities.
	Keys Keys
	// Revocations is the replica's shared informer on Revocations; New
	// adds an index and a handler, so it must not have started yet.
	Revocations cache.SharedIndexInformer
	// Validity is nextUpdate - issue time; DefaultValidity when zero.
	Validity time.Duration
	// Clock is the real clock but in tests.
	Clock clock.WithTicker
}

// key is one CA key.
type key struct{ ca, keyID string }

// entry holds the CRL of one key; mu serializes its issues, so that a
// later issue (with later revocations) is never overtaken by an earlier.
type entry struct {
	mu  sync.Mutex
	crl *CRL
	// cost is how long the last issue took (nanoseconds; atomic): a
	// change waits at least twice as long before the next, so that a
	// large CRL (about 0.1 s for 100,000 entries on 2 cores) under a stream
	// of revocations takes at most a third of a core.
	cost atomic.Int64
}

// Manager issues and caches the CRLs.
type Manager struct {
	keys        Keys
	revocations cache.SharedIndexInformer
	validity    time.Duration
	clock       clock.WithTicker
	queue       workqueue.TypedRateLimitingInterface[key]

	mu      sync.Mutex
	entries map[key]*entry
	// lastNumber is the last CRL number issued, for strictly increasing
	// numbers when two issues fall into one millisecond.
	lastNumber int64
	subs       map[int]func(caName string)
	nextSub    int
}

// byCAKey indexes Revocations by "<caName>/<caKeyID>".
const byCAKey = "crl.byCAKey"

func indexKey(ca, keyID string) string { return ca + "/" + keyID }

// New builds a Manager on an informer that has not started.
func New(cfg Config) (*Manager, error) {
	if cfg.Validity == 0 {
		cfg.Validity = DefaultValidity
	}
	if cfg.Validity < MinValidity {
		return nil, fmt.Errorf("CRL validity %s is below the minimum %s", cfg.Validity, MinValidity)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	m := &Manager{
		keys:        cfg.Keys,
		revocations: cfg.Revocations,
		validity:    cfg.Validity,
		clock:       cfg.Clock,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[key](time.Second, retryAfter),
			workqueue.TypedRateLimitingQueueConfig[key]{Name: "crl", Clock: cfg.Clock}),
		entries: map[key]*entry{},
		subs:    map[int]func(string){},
	}
	if err := cfg.Revocations.AddIndexers(cache.Indexers{byCAKey: func(obj any) ([]string, error) {
		r, ok := obj.(*certv1alpha1.Revocation)
		if !ok || r.Status.CAName == "" {
			return nil, nil
		}
		return []string{indexKey(r.Status.CAName, r.Status.CAKeyID)}, nil
	}}); err != nil {
		return nil, fmt.Errorf("indexing Revocations by CA key: %w", err)
	}
	if _, err := cfg.Revocations.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    m.changed,
		UpdateFunc: func(_, obj any) { m.changed(obj) },
		DeleteFunc: m.changed,
	}); err != nil {
		return nil, fmt.Errorf("watching Revocations for CRLs: %w", err)
	}
	return m, nil
}

// Validity is nextUpdate - issue time of every CRL.
func (m *Manager) Validity() time.Duration { return m.validity }

// HasSynced says whether the Revocations are loaded: before, no CRL is
// issued (ErrNotReady).
func (m *Manager) HasSynced() bool { return m.revocations.HasSynced() }

// changed schedules the CRL of a revocation's key, if one was issued: a
// key nobody asked for gets its CRL when first asked.
func (m *Manager) changed(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	r, ok := obj.(*certv1alpha1.Revocation)
	if !ok {
		return
	}
	k := key{r.Status.CAName, r.Status.CAKeyID}
	m.mu.Lock()
	e, exists := m.entries[k]
	m.mu.Unlock()
	if exists {
		m.queue.AddAfter(k, max(Debounce, 2*time.Duration(e.cost.Load())))
	}
}

// Subscribe calls fn with a CA's name after each CRL issued for one of its
// keys, from the Manager's worker: fn must not block. remove ends it.
func (m *Manager) Subscribe(fn func(caName string)) (remove func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := m.nextSub
	m.nextSub++
	m.subs[id] = fn
	return func() {
		m.mu.Lock()
		delete(m.subs, id)
		m.mu.Unlock()
	}
}

// Run re-issues CRLs as their revocations change and their validity runs
// out, until ctx is done.
func (m *Manager) Run(ctx context.Context) {
	runner.Run(ctx, "crl", m.queue, []cache.InformerSynced{m.revocations.HasSynced}, 1, m.sync)
}

// sync issues a key's CRL again, or forgets the key once it is gone.
func (m *Manager) sync(ctx context.Context, k key) (time.Duration, error) {
	m.mu.Lock()
	e, ok := m.entries[k]
	m.mu.Unlock()
	if !ok {
		return 0, nil
	}
	if !m.known(k) {
		m.forget(k)
		return 0, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	begin := time.Now()
	crl, err := m.issue(ctx, k)
	e.cost.Store(int64(time.Since(begin)))
	if errors.Is(err, ErrNotFound) {
		m.forget(k)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	e.crl = crl
	return m.refreshIn(crl), nil
}

// refreshIn is when a CRL is issued again if nothing changes: at half its
// validity.
func (m *Manager) refreshIn(crl *CRL) time.Duration {
	return max(crl.Issued.Add(m.validity/2).Sub(m.clock.Now()), time.Millisecond)
}

// known says whether the key is one of its CA's current keys.
func (m *Manager) known(k key) bool {
	cur, prev, err := m.keys.KeyIDs(k.ca)
	return err == nil && k.keyID != "" && (k.keyID == cur || k.keyID == prev)
}

func (m *Manager) forget(k key) {
	m.mu.Lock()
	delete(m.entries, k)
	m.mu.Unlock()
	entriesGauge.DeleteLabelValues(k.ca, k.keyID)
	sizeGauge.DeleteLabelValues(k.ca, k.keyID)
	thisUpdateGauge.DeleteLabelValues(k.ca, k.keyID)
	nextUpdateGauge.DeleteLabelValues(k.ca, k.keyID)
}

// Current returns the CRL of the CA's current key.
func (m *Manager) Current(ctx context.Context, caName string) (*CRL, error) {
	cur, _, err := m.keys.KeyIDs(caName)
	if err != nil {
		return nil, notFound(err)
	}
	return m.Get(ctx, caName, cur)
}

// Live returns the CRLs of the CA's keys that exist: the current key's
// first, then, during a rotation, the previous key's, whose certificates
// the trust bundle still holds and which relying parties therefore check
// against its CRL. A previous key destroyed meanwhile (Complete) is left
// out; any other failure of either is an error, as a set of CRLs without
// one of them would have its certificates fail a check with "unable to
// get certificate CRL".
func (m *Manager) Live(ctx context.Context, caName string) ([]*CRL, error) {
	cur, prev, err := m.keys.KeyIDs(caName)
	if err != nil {
		return nil, notFound(err)
	}
	current, err := m.Get(ctx, caName, cur)
	if err != nil {
		return nil, err
	}
	out := []*CRL{current}
	if prev == "" || prev == cur {
		return out, nil
	}
	previous, err := m.Get(ctx, caName, prev)
	switch {
	case errors.Is(err, ErrNotFound):
		return out, nil
	case err != nil:
		return nil, fmt.Errorf("the CRL of the previous key: %w", err)
	}
	return append(out, previous), nil
}

// Get returns the CRL of one of the CA's keys, current or previous: the
// cached one while it is valid, else one issued now.
func (m *Manager) Get(ctx context.Context, caName, keyID string) (*CRL, error) {
	if !m.HasSynced() {
		return nil, ErrNotReady
	}
	k := key{caName, keyID}
	if !m.known(k) {
		return nil, fmt.Errorf("CertificateAuthority %q has no current or previous key %q: %w", caName, keyID, ErrNotFound)
	}
	// The entry exists before its first issue reads the revocations, so
	// that a change after that read schedules the next issue (changed).
	m.mu.Lock()
	e, ok := m.entries[k]
	if !ok {
		e = &entry{}
		m.entries[k] = e
	}
	m.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.crl != nil && m.clock.Now().Before(e.crl.NextUpdate) {
		return e.crl, nil
	}
	begin := time.Now()
	crl, err := m.issue(ctx, k)
	e.cost.Store(int64(time.Since(begin)))
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			m.forget(k)
		}
		return nil, err
	}
	e.crl = crl
	m.queue.AddAfter(k, m.refreshIn(crl))
	return crl, nil
}

func notFound(err error) error {
	if errors.Is(err, authority.ErrNoSuchKey) || apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// reasonCodes are RFC 5280's CRLReason values (5.3.1).
var reasonCodes = map[certv1alpha1.RevocationReason]int{
	certv1alpha1.RevocationReasonUnspecified:          0,
	certv1alpha1.RevocationReasonKeyCompromise:        1,
	certv1alpha1.RevocationReasonCACompromise:         2,
	certv1alpha1.RevocationReasonAffiliationChanged:   3,
	certv1alpha1.RevocationReasonSuperseded:           4,
	certv1alpha1.RevocationReasonCessationOfOperation: 5,
	certv1alpha1.RevocationReasonPrivilegeWithdrawn:   9,
	certv1alpha1.RevocationReasonAACompromise:         10,
}

// ReasonCode is the RFC 5280 code of a reason; 0 (unspecified, which a
// CRL entry leaves out) for an empty or unknown one.
func ReasonCode(r certv1alpha1.RevocationReason) int { return reasonCodes[r] }

// issue makes and signs a key's CRL from the cached Revocations.
func (m *Manager) issue(ctx context.Context, k key) (*CRL, error) {
	start := time.Now()
	auth, err := m.keys.KeyByID(ctx, k.ca, k.keyID)
	if err != nil {
		issuedTotal.WithLabelValues(k.ca, "error").Inc()
		return nil, notFound(err)
	}
	objs, err := m.revocations.GetIndexer().ByIndex(byCAKey, indexKey(k.ca, k.keyID))
	if err != nil {
		issuedTotal.WithLabelValues(k.ca, "error").Inc()
		return nil, err
	}
	now := m.clock.Now()
	crl, err := Issue(Revoked(objs, now), auth.Cert, auth.Signer, m.nextNumber(now), now, m.validity)
	if err != nil {
		issuedTotal.WithLabelValues(k.ca, "error").Inc()
		return nil, fmt.Errorf("CertificateAuthority %q key %s: %w", k.ca, k.keyID, err)
	}
	crl.CAName, crl.KeyID = k.ca, k.keyID
	issuedTotal.WithLabelValues(k.ca, "issued").Inc()
	issueDuration.Observe(time.Since(start).Seconds())
	entriesGauge.WithLabelValues(k.ca, k.keyID).Set(float64(crl.Entries))
	sizeGauge.WithLabelValues(k.ca, k.keyID).Set(float64(len(crl.DER)))
	thisUpdateGauge.WithLabelValues(k.ca, k.keyID).Set(float64(crl.ThisUpdate.Unix()))
	nextUpdateGauge.WithLabelValues(k.ca, k.keyID).Set(float64(crl.NextUpdate.Unix()))
	klog.FromContext(ctx).V(2).Info("Issued CRL", "ca", k.ca, "keyID", k.keyID, "number", crl.Number, "entries", crl.Entries, "bytes", len(crl.DER), "nextUpdate", crl.NextUpdate)
	m.mu.Lock()
	subs := make([]func(string), 0, len(m.subs))
	for _, fn := range m.subs {
		subs = append(subs, fn)
	}
	m.mu.Unlock()
	for _, fn := range subs {
		fn(k.ca)
	}
	return crl, nil
}

// nextNumber is the issue time in milliseconds, or one more than the last
// number when the clock has not moved past it (same millisecond, or a
// clock stepped back).
func (m *Manager) nextNumber(now time.Time) *big.Int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := max(now.UnixMilli(), m.lastNumber+1)
	m.lastNumber = n
	return big.NewInt(n)
}

// Revoked are the CRL entries of revocations: those whose certificate has
// not expired at now (an expired certificate is invalid anyway, and its
// Revocation is deleted soon after). A revocation whose serial number does
// not parse (it cannot: the server sets it) is left out.
func Revoked(objs []any, now time.Time) []x509.RevocationListEntry {
	out := make([]x509.RevocationListEntry, 0, len(objs))
	for _, obj := range objs {
		r, ok := obj.(*certv1alpha1.Revocation)
		if !ok {
			continue
		}
		if na := r.Status.NotAfter; !na.IsZero() && na.Time.Before(now) {
			continue
		}
		serial, ok := parseSerial(r.Status.SerialNumber)
		if !ok {
			continue
		}
		out = append(out, x509.RevocationListEntry{
			SerialNumber:   serial,
			RevocationTime: r.Status.RevocationTime.Time,
			ReasonCode:     ReasonCode(r.Spec.Reason),
		})
	}
	return out
}

// parseSerial reads a serial number in hex (as the server writes it, any
// case, odd length too): through hex.DecodeString, several times cheaper
// than big.Int's SetString for 100,000 serials.
func parseSerial(s string) (*big.Int, bool) {
	if s == "" {
		return nil, false
	}
	if len(s)%2 == 1 {
		s = "0" + s
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, false
	}
	return new(big.Int).SetBytes(b), true
}

// Issue signs a CRL of entries with the CA's key: number, thisUpdate
// Backdate before now, nextUpdate validity after it. It is encoded as
// crypto/x509 encodes it (createRevocationList); crypto/x509 checks the
// signature of a key that is not a Go key in this process (a faulty
// token's CRL would verify nowhere) and refuses a CA certificate without
// the cRLSign key usage or a subject key ID.
func Issue(entries []x509.RevocationListEntry, caCert *x509.Certificate, signer crypto.Signer, number *big.Int, now time.Time, validity time.Duration) (*CRL, error) {
	thisUpdate, nextUpdate := now.Add(-Backdate), now.Add(validity)
	der, err := createRevocationList(&x509.RevocationList{
		RevokedCertificateEntries: entries,
		Number:                    number,
		ThisUpdate:                thisUpdate,
		NextUpdate:                nextUpdate,
	}, caCert, signer)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(der)
	return &CRL{
		DER: der, Number: number, Issued: now, ThisUpdate: thisUpdate.UTC().Truncate(time.Second), NextUpdate: nextUpdate.UTC().Truncate(time.Second),
		Entries: len(entries), ETag: `"` + hex.EncodeToString(sum[:16]) + `"`,
	}, nil
}
