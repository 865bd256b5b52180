package certificateauthority

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

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

// Records lists what a CA has issued.
type Records interface {
	List(ctx context.Context, caName string) ([]issuance.Record, error)
}

// rotate takes one rotation step, as the phase the rotate subresource set
// asks, and moves status to the next phase. Every step is recorded before
// the next starts and is idempotent, so a process killed anywhere resumes
// where it stopped:
//   - Preparing: make key generation n+1 and its certificate, and make it
//     current in the binding with the old key as previous (one
//     compare-and-swap); then status is Prepared, trusting both.
//   - Completing: destroy the previous key in its store, then drop it from
//     the binding; then status is Completed, trusting the new CA only.
func (c *Controller) rotate(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority, b *cabinding.Binding, status *rotationv1alpha1.CertificateAuthorityStatus) (*cabinding.Binding, error) {
	now := metav1.NewTime(c.clock.Now())
	switch ca.Status.Phase {
	case rotationv1alpha1.PhasePreparing:
		reached(ctx, StepPreparingStart)
		if b.Previous == nil {
			next, err := c.newGeneration(ctx, ca, b)
			if err != nil {
				return nil, err
			}
			b = next
		}
		reached(ctx, StepPreparingBound)
		status.Phase = rotationv1alpha1.PhasePrepared
		status.LastInitiationFinishedTime = &now
		c.event(ca, "RotationPrepared", "A new CA (key %s) signs from now on; old and new are trusted. Renew certificates of the previous CA before the rotation completes.", b.KeyID)
		klog.FromContext(ctx).Info("CA rotation prepared: the new CA signs, both are trusted", "name", ca.Name, "keyID", b.KeyID, "previousKeyID", b.Previous.KeyID)
	case rotationv1alpha1.PhaseCompleting:
		if b.Previous != nil {
			next, err := c.retirePrevious(ctx, ca, b)
			if err != nil {
				return nil, err
			}
			b = next
		}
		reached(ctx, StepCompletingBindingDone)
		c.event(ca, "RotationCompleted", "The previous CA is no longer trusted and its key is destroyed; only the CA with key %s is trusted.", b.KeyID)
		status.Phase = rotationv1alpha1.PhaseCompleted
		status.LastCompletionTime = &now
		status.PendingRenewal, status.PendingRenewals = 0, nil
		klog.FromContext(ctx).Info("CA rotation completed: the previous CA is no longer trusted and its key is destroyed", "name", ca.Name, "keyID", b.KeyID)
	}
	return b, nil
}

func (c *Controller) event(ca *rotationv1alpha1.CertificateAuthority, reason, format string, args ...any) {
	if c.events != nil {
		c.events.Eventf(ca, corev1.EventTypeNormal, reason, format, args...)
	}
}

// newGeneration makes the next key and its self-signed certificate and
// records them as current, the old ones as previous.
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
	next := &cabinding.Binding{CAName: b.CAName, CAUID: b.CAUID, KeyID: keyID, Certificate: cert.Raw, Generation: gen,
		Previous: &cabinding.Key{KeyID: b.KeyID, Certificate: b.Certificate}}
	if err := c.authorities.Bindings.Replace(ctx, b, next); err != nil {
		if errors.Is(err, cabinding.ErrConflict) {
			return nil, fmt.Errorf("rotating CertificateAuthority %s: %w; retrying", ca.Name, err)
		}
		return nil, err
	}
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
	next := *b
	next.Previous = nil
	if err := c.authorities.Bindings.Replace(ctx, b, &next); err != nil {
		return nil, err
	}
	return &next, nil
}

// publish writes what the binding says into status: current, previous
// (during a rotation) and the trust bundle of both.
func publish(status *rotationv1alpha1.CertificateAuthorityStatus, b *cabinding.Binding) error {
	cert, err := x509.ParseCertificate(b.Certificate)
	if err != nil {
		return fmt.Errorf("the bound certificate does not parse: %w", err)
	}
	if status.Current == nil || status.Current.Fingerprint != signing.Fingerprint(cert) || status.Current.KeyID != b.KeyID {
		status.Current = describe(cert, b.KeyID)
	}
	status.Previous = nil
	bundle := status.Current.Certificate
	if b.Previous != nil {
		prev, err := x509.ParseCertificate(b.Previous.Certificate)
		if err != nil {
			return fmt.Errorf("the previous certificate does not parse: %w", err)
		}
		status.Previous = describe(prev, b.Previous.KeyID)
		bundle += status.Previous.Certificate
	}
	status.TrustBundle = bundle
	return nil
}

// countPending counts the certificates signed by the previous key that are
// still valid and whose requester has not had the same subject certified
// by the current key.
func (c *Controller) countPending(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority, b *cabinding.Binding, status *rotationv1alpha1.CertificateAuthorityStatus) error {
	if c.records == nil || b.Previous == nil {
		status.PendingRenewal, status.PendingRenewals = 0, nil
		return nil
	}
	records, err := c.records.List(ctx, ca.Name)
	if err != nil {
		return fmt.Errorf("listing the issuance records of %s: %w", ca.Name, err)
	}
	now := c.clock.Now()
	renewed := map[[2]string]bool{}
	for _, r := range records {
		if r.CAKeyID == b.KeyID {
			renewed[[2]string{r.Requester, r.Subject}] = true
		}
	}
	var pending []issuance.Record
	for _, r := range records {
		if r.CAKeyID == b.Previous.KeyID && r.NotAfter.After(now) && !renewed[[2]string{r.Requester, r.Subject}] {
			pending = append(pending, r)
		}
	}
	sort.Slice(pending, func(i, j int) bool { return pending[i].NotAfter.Before(pending[j].NotAfter) })
	status.PendingRenewal = int32(len(pending))
	status.PendingRenewals = nil
	for i, r := range pending {
		if i == maxPendingListed {
			break
		}
		status.PendingRenewals = append(status.PendingRenewals, rotationv1alpha1.PendingRenewal{
			Requester: r.Requester, Subject: r.Subject, CSRName: r.CSRName, SerialNumber: r.Serial, NotAfter: metav1.NewTime(r.NotAfter),
		})
	}
	return nil
}
