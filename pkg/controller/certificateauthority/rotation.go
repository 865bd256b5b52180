package certificateauthority

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/apis/message"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/apis/rotation/validation"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
)

const (
	// pendingRecount is how often a Prepared CA counts its not yet renewed
	// certificates again.
	pendingRecount = 5 * time.Second
	// maxPendingListed bounds status.pendingRenewals.
	maxPendingListed = validation.MaxPendingListed
)

// Records reads and prunes what a CA has issued (issuance.Recorder).
type Records interface {
	// Scan reads every record of a CA, a page at a time.
	Scan(ctx context.Context, caName string, fn func(issuance.Record) error) error
	// Revision changes whenever a record of the CA is written.
	Revision(ctx context.Context, caName string) (int64, error)
	// Prune deletes the records of a CA that drop selects.
	Prune(ctx context.Context, caName string, drop func(issuance.Record) bool) (int, error)
}

// rotate takes one rotation step, as the phase the rotate subresource set
// asks, and moves status to the next phase. Every step is recorded before
// the next starts and is idempotent, so a process killed anywhere resumes
// where it stopped:
//   - Preparing: make key generation n+1 and its certificate and record
//     it as the binding's next key (one compare-and-swap). It is published
//     beside the current one (status, then every bundle rekey writes) but
//     signs nothing: the old key signs on. Once the new CA is trusted
//     (trustGate), promote it: current in the binding, the old key
//     previous (one compare-and-swap); then status is Prepared, and from
//     then on the new CA signs.
//   - Completing: destroy the previous key in its store, delete the
//     issuance records of the certificates it signed (nothing it signed
//     can be trusted any more, so nothing will ever count them), then drop
//     it from the binding; then status is Completed, trusting the new CA
//     only. The binding lists the old key until its records are gone, so
//     a step interrupted anywhere is redone, pruning included.
//
// recheck is when to look again while the trust gate waits (0: an event
// will requeue the CA).
func (c *Controller) rotate(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority, b *cabinding.Binding, status *rotationv1alpha1.CertificateAuthorityStatus) (_ *cabinding.Binding, recheck time.Duration, _ error) {
	now := metav1.NewTime(c.clock.Now())
	switch ca.Status.Phase {
	case rotationv1alpha1.PhasePreparing:
		reached(ctx, StepPreparingStart)
		// A binding with a previous key was promoted already (the process
		// stopped before status said Prepared): only status is left.
		if b.Previous == nil {
			if b.Next == nil {
				next, err := c.newGeneration(ctx, ca, b)
				if err != nil {
					return nil, 0, err
				}
				b = next
			}
			open, wait, err := c.trustGate(ctx, ca, b, status)
			if err != nil || !open {
				return b, wait, err
			}
			promoted, err := c.promote(ctx, ca, b)
			if err != nil {
				return nil, 0, err
			}
			b = promoted
		}
		reached(ctx, StepPreparingBound)
		status.Phase = rotationv1alpha1.PhasePrepared
		// Rounded up to the second, as status keeps whole seconds:
		// rekey-agents draw their renewal points from this time, and a time
		// rounded down would put up to a second's share of the window's
		// points before they can see Prepared, all renewing at once.
		finished := metav1.NewTime(now.Truncate(time.Second))
		if finished.Before(&now) {
			finished = metav1.NewTime(finished.Add(time.Second))
		}
		status.LastInitiationFinishedTime = &finished
		if isTokenKey(ca) {
			c.event(ca, "RotationPrepared", "The new key (key %s) signs service-account tokens from now on; both keys verify. Complete after %s, when every token of the previous key has expired.",
				b.KeyID, finished.Add(maxTokenExpiration(ca)+TokenExpiryLeeway).UTC().Format(time.RFC3339))
		} else {
			c.event(ca, "RotationPrepared", "The new CA (key %s) is trusted and signs from now on; old and new are trusted. Renew certificates of the previous CA before the rotation completes.", b.KeyID)
		}
		klog.FromContext(ctx).Info("CA rotation prepared: the new CA is trusted and signs, both are trusted", "name", ca.Name, "keyID", b.KeyID, "previousKeyID", b.Previous.KeyID)
	case rotationv1alpha1.PhaseCompleting:
		if b.Previous != nil {
			next, err := c.retirePrevious(ctx, ca, b)
			if err != nil {
				return nil, 0, err
			}
			b = next
		}
		reached(ctx, StepCompletingBindingDone)
		c.event(ca, "RotationCompleted", "The previous CA is no longer trusted and its key is destroyed; only the CA with key %s is trusted.", b.KeyID)
		status.Phase = rotationv1alpha1.PhaseCompleted
		status.LastCompletionTime = &now
		status.PendingRenewal, status.PendingRenewals = 0, nil
		c.forgetCount(ca.Name)
		klog.FromContext(ctx).Info("CA rotation completed: the previous CA is no longer trusted and its key is destroyed", "name", ca.Name, "keyID", b.KeyID)
	}
	return b, 0, nil
}

func (c *Controller) event(ca *rotationv1alpha1.CertificateAuthority, reason, format string, args ...any) {
	c.events.Event(ca, corev1.EventTypeNormal, reason, message.CapEvent(fmt.Sprintf(format, args...)))
}

// newGeneration makes the next key and its self-signed certificate and
// records them as the binding's next key: published, not signing.
func (c *Controller) newGeneration(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority, b *cabinding.Binding) (*cabinding.Binding, error) {
	store, err := c.authorities.Stores.For(ca.Spec.KeyStore)
	if err != nil {
		return nil, err
	}
	gen := b.Gen() + 1
	keyID := KeyIDFor(ca, gen)
	// After a crash between making the key and recording it, the same key
	// is found again (the ID is derived), so no second key is made.
	key, _, err := store.GetOrCreate(ctx, keyID, signing.Algorithm(ca.Spec.KeyAlgorithm))
	if err != nil {
		return nil, err
	}
	cert, err := signing.NewSelfSignedCA(ca.Spec.CommonName, key, ca.Spec.Validity.Duration, c.clock.Now())
	if err != nil {
		return nil, err
	}
	reached(ctx, StepPreparingKeyMade)
	next := *b
	next.Next = &cabinding.Key{KeyID: keyID, Certificate: cert.Raw}
	if err := c.authorities.Bindings.Replace(ctx, b, &next); err != nil {
		if errors.Is(err, cabinding.ErrConflict) {
			return nil, fmt.Errorf("rotating CertificateAuthority %s: %w; retrying", ca.Name, err)
		}
		return nil, err
	}
	klog.FromContext(ctx).Info("CA rotation: new key made and published beside the current one; the current CA signs until the new one is trusted", "name", ca.Name, "keyID", keyID)
	return &next, nil
}

// promote makes the next key current and the current one previous: from
// here the new CA signs.
func (c *Controller) promote(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority, b *cabinding.Binding) (*cabinding.Binding, error) {
	gen := b.Gen() + 1
	next := &cabinding.Binding{CAName: b.CAName, CAUID: b.CAUID, KeyID: b.Next.KeyID, Certificate: b.Next.Certificate, Generation: gen,
		Previous: &cabinding.Key{KeyID: b.KeyID, Certificate: b.Certificate}}
	if err := c.authorities.Bindings.Replace(ctx, b, next); err != nil {
		if errors.Is(err, cabinding.ErrConflict) {
			return nil, fmt.Errorf("rotating CertificateAuthority %s: %w; retrying", ca.Name, err)
		}
		return nil, err
	}
	// The cache is the server's one: the issuer signs with the new key
	// from its next request.
	c.authorities.Forget(ca.Name)
	return next, nil
}

// retirePrevious destroys the previous key, then forgets it.
func (c *Controller) retirePrevious(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority, b *cabinding.Binding) (*cabinding.Binding, error) {
	store, err := c.authorities.Stores.For(ca.Spec.KeyStore)
	if err != nil {
		return nil, err
	}
	if err := store.Delete(ctx, b.Previous.KeyID); err != nil {
		return nil, fmt.Errorf("destroying key %s: %w", b.Previous.KeyID, err)
	}
	reached(ctx, StepCompletingKeyDeleted)
	if c.records != nil {
		prev := b.Previous.KeyID
		n, err := c.records.Prune(ctx, ca.Name, func(r issuance.Record) bool { return r.CAKeyID == prev })
		if err != nil {
			return nil, fmt.Errorf("pruning the issuance records of destroyed key %s: %w", prev, err)
		}
		klog.FromContext(ctx).Info("Pruned the issuance records of the destroyed CA key", "name", ca.Name, "keyID", prev, "records", n)
	}
	if c.Revocations != nil {
		n, err := c.Revocations.DeleteOfKey(ctx, ca.Name, b.Previous.KeyID)
		if err != nil {
			return nil, fmt.Errorf("deleting the revocations of destroyed key %s: %w", b.Previous.KeyID, err)
		}
		klog.FromContext(ctx).Info("Deleted the revocations of the destroyed CA key", "name", ca.Name, "keyID", b.Previous.KeyID, "revocations", n)
	}
	next := *b
	next.Previous = nil
	if err := c.authorities.Bindings.Replace(ctx, b, &next); err != nil {
		return nil, err
	}
	return &next, nil
}

// publish writes what the binding says into status: current, previous
// (from Prepared until Completed), next (while Preparing), and the trust
// bundle of all of them.
func publish(status *rotationv1alpha1.CertificateAuthorityStatus, b *cabinding.Binding) error {
	cert, err := x509.ParseCertificate(b.Certificate)
	if err != nil {
		return fmt.Errorf("the bound certificate does not parse: %w", err)
	}
	if status.Current == nil || status.Current.Fingerprint != signing.Fingerprint(cert) || status.Current.KeyID != b.KeyID {
		status.Current = describe(cert, b.KeyID)
	}
	bundle := status.Current.Certificate
	status.Previous, err = describeKey(b.Previous, "previous")
	if err != nil {
		return err
	}
	if status.Previous != nil {
		bundle += status.Previous.Certificate
	}
	status.Next, err = describeKey(b.Next, "next")
	if err != nil {
		return err
	}
	if status.Next != nil {
		bundle += status.Next.Certificate
	}
	status.TrustBundle = bundle
	return nil
}

func describeKey(k *cabinding.Key, which string) (*rotationv1alpha1.CACertificate, error) {
	if k == nil {
		return nil, nil
	}
	cert, err := x509.ParseCertificate(k.Certificate)
	if err != nil {
		return nil, fmt.Errorf("the %s certificate does not parse: %w", which, err)
	}
	return describe(cert, k.KeyID), nil
}

// pendingCount is what one reading of a CA's records found, and what it
// depends on: the two keys, the records' revision, and the earliest end
// of validity among the pending certificates (when one expires, the count
// drops without a record changing).
type pendingCount struct {
	keyID, previousKeyID string
	revision             int64
	validUntil           time.Time
	// countedAt and took say when the count was made and how long it
	// took: the next is not made before countedAt + recountFactor*took.
	countedAt time.Time
	took      time.Duration
	count     int32
	listed    []rotationv1alpha1.PendingRenewal
}

// recountFactor keeps counting below a fifth of one core's time however
// many records a CA holds: a count that read records for 4s is not made
// again for 20s, renewals or not.
const recountFactor = 5

// identity is who a certificate was for: the requester and the subject
// certified. A certificate counts as renewed once the current key has
// certified the same subject for the same requester, or for the
// certificate's holder (renewed reports which).
type identity struct{ requester, subject string }

// renewedBy says whether a certificate of the previous key, requested by
// r.Requester, has been renewed: the current key certified its subject for
// the same requester, or for its holder (the user a client certificate
// authenticates as: a node's first certificate is requested with its
// bootstrap identity and renewed as system:node:NAME, the certificate's
// own subject).
func renewedBy(renewed map[identity]bool, r issuance.Record) bool {
	return renewed[identity{r.Requester, r.Subject}] || r.Holder != "" && renewed[identity{r.Holder, r.Subject}]
}

// pendingOf is one identity's valid certificates of the previous key.
type pendingOf struct {
	count    int
	earliest time.Time
	// holder is the certificates' holder (the same for one subject).
	holder string
}

// countPending counts the certificates signed by the previous key that are
// still valid and not renewed (renewedBy): neither their requester nor
// their holder has had the same subject certified by the current key.
//
// The records are read a page at a time, and only when they changed since
// the last count (or a counted certificate has expired since), so a
// Prepared CA looked at every pendingRecount costs one small etcd read
// while nothing happens; and not again before recountFactor times the
// last count's duration, so a CA with very many records is counted less
// often (its status lags by as much) instead of keeping a core busy. What a count holds grows with the identities
// that have certificates of the two keys (a few words each), not with the
// records.
func (c *Controller) countPending(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority, b *cabinding.Binding, status *rotationv1alpha1.CertificateAuthorityStatus) error {
	if c.records == nil || b.Previous == nil {
		status.PendingRenewal, status.PendingRenewals = 0, nil
		c.forgetCount(ca.Name)
		return nil
	}
	now := c.clock.Now()
	rev, err := c.records.Revision(ctx, ca.Name)
	if err != nil {
		return err
	}
	c.countsMu.Lock()
	cached, ok := c.counts[ca.Name]
	c.countsMu.Unlock()
	stale := !ok || cached.keyID != b.KeyID || cached.previousKeyID != b.Previous.KeyID
	changed := ok && (cached.revision != rev || !now.Before(cached.validUntil))
	if stale || changed && !now.Before(cached.countedAt.Add(recountFactor*cached.took)) {
		cached, err = c.count(ctx, ca.Name, b, rev, now)
		if err != nil {
			return err
		}
		// The real clock's readings carry a monotonic part, which Sub uses.
		cached.countedAt, cached.took = now, c.clock.Since(now)
		c.countsMu.Lock()
		if c.counts == nil {
			c.counts = map[string]*pendingCount{}
		}
		c.counts[ca.Name] = cached
		c.countsMu.Unlock()
	}
	status.PendingRenewal = cached.count
	status.PendingRenewals = append([]rotationv1alpha1.PendingRenewal(nil), cached.listed...)
	return nil
}

// forgetCount drops a CA's cached count (no rotation in progress).
func (c *Controller) forgetCount(name string) {
	c.countsMu.Lock()
	delete(c.counts, name)
	c.countsMu.Unlock()
}

// count reads every record of a CA: once to count, and a second time
// when the first certificates to list could not be told on the first pass
// (which identities renewed is known only at its end).
func (c *Controller) count(ctx context.Context, name string, b *cabinding.Binding, rev int64, now time.Time) (*pendingCount, error) {
	renewed := map[identity]bool{}
	pending := map[identity]*pendingOf{}
	pendingOld := func(r issuance.Record) bool { return r.CAKeyID == b.Previous.KeyID && r.NotAfter.After(now) }
	var first []issuance.Record
	err := c.records.Scan(ctx, name, func(r issuance.Record) error {
		id := identity{r.Requester, r.Subject}
		switch {
		case r.CAKeyID == b.KeyID:
			renewed[id] = true
		case pendingOld(r):
			p := pending[id]
			if p == nil {
				p = &pendingOf{earliest: r.NotAfter, holder: r.Holder}
				pending[id] = p
			}
			p.count++
			if r.NotAfter.Before(p.earliest) {
				p.earliest = r.NotAfter
			}
			first = keepFirst(first, r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the issuance records of %s: %w", name, err)
	}
	out := &pendingCount{keyID: b.KeyID, previousKeyID: b.Previous.KeyID, revision: rev, validUntil: now.Add(24 * time.Hour)}
	total := 0
	for id, p := range pending {
		if renewedBy(renewed, issuance.Record{Requester: id.requester, Subject: id.subject, Holder: p.holder}) {
			continue
		}
		total += p.count
		if p.earliest.Before(out.validUntil) {
			out.validUntil = p.earliest
		}
	}
	listed := first[:0]
	for _, r := range first {
		if !renewedBy(renewed, r) {
			listed = append(listed, r)
		}
	}
	if len(listed) < min(total, maxPendingListed) {
		// Renewed identities' certificates took places in the list.
		listed = nil
		err := c.records.Scan(ctx, name, func(r issuance.Record) error {
			if pendingOld(r) && !renewedBy(renewed, r) {
				listed = keepFirst(listed, r)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("reading the issuance records of %s: %w", name, err)
		}
	}
	out.count = int32(min(total, math.MaxInt32))
	for _, r := range listed {
		out.listed = append(out.listed, rotationv1alpha1.PendingRenewal{
			Requester: r.Requester, Subject: r.Subject, CSRName: r.CSRName, SerialNumber: r.Serial, NotAfter: metav1.NewTime(r.NotAfter),
		})
	}
	return out, nil
}

// keepFirst adds r to list, sorted by end of validity, and keeps the
// maxPendingListed that expire first.
func keepFirst(list []issuance.Record, r issuance.Record) []issuance.Record {
	i := sort.Search(len(list), func(i int) bool { return r.NotAfter.Before(list[i].NotAfter) })
	if i >= maxPendingListed {
		return list
	}
	list = append(list, issuance.Record{})
	copy(list[i+1:], list[i:])
	list[i] = r
	if len(list) > maxPendingListed {
		list = list[:maxPendingListed]
	}
	return list
}
