package certificateauthority

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"rekey.io/rekey/pkg/apis/message"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/apis/rotation/validation"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
)

// ConsumersByCA indexes TrustConsumers by the CAs they name.
const ConsumersByCA = "byCertificateAuthority"

// maxWaitingListed bounds status.trust.waitingFor and the names in the
// TrustPropagated condition's message.
const maxWaitingListed = 20

// consumersByCA is the ConsumersByCA index function.
func consumersByCA(obj any) ([]string, error) {
	tc, ok := obj.(*rotationv1alpha1.TrustConsumer)
	if !ok {
		return nil, nil
	}
	return tc.Spec.CertificateAuthorities, nil
}

// holds says whether a consumer reported holding the CA certificate with
// the given fingerprint among the CA's.
func holds(tc *rotationv1alpha1.TrustConsumer, caName, fingerprint string) bool {
	for _, h := range tc.Status.Holds {
		if h.CertificateAuthority == caName {
			return slices.Contains(h.Fingerprints, fingerprint)
		}
	}
	return false
}

// trustGate says whether a Preparing CA's next key may sign: the stored
// status already publishes it (so every reader of status, and rekey's own
// publishers, have it to copy), every rekey publisher concerned wrote it
// everywhere (trustpublish), every TrustConsumer naming the CA reports
// holding it, and spec.rotation.trustPropagation has passed since the
// publication was first complete; or an operator overrode the wait. It
// fills status.trust and the TrustPropagated condition either way, and
// says when to look again while it waits (0: events requeue).
//
// Nothing in the consumers' objects can open the gate early: a report
// counts only for the fingerprint of the key the binding holds as next,
// which the server made.
func (c *Controller) trustGate(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority, b *cabinding.Binding, status *rotationv1alpha1.CertificateAuthorityStatus) (bool, time.Duration, error) {
	cert, err := x509.ParseCertificate(b.Next.Certificate)
	if err != nil {
		return false, 0, fmt.Errorf("the next certificate does not parse: %w", err)
	}
	next := signing.Fingerprint(cert)
	now := c.clock.Now()
	trust := &rotationv1alpha1.TrustStatus{}
	if status.Trust != nil {
		trust.PublishedTime, trust.OverriddenTime = status.Trust.PublishedTime, status.Trust.OverriddenTime
	}
	status.Trust = trust

	// Rekey's own bundles: first status (what the stored object says is
	// what every publisher copies), then what the publishers wrote.
	inStatus := ca.Status.Next != nil && ca.Status.Next.Fingerprint == next
	var unpublished []string
	if !inStatus {
		unpublished = []string{"status: the new CA is not in status.trustBundle yet"}
	} else if c.published != nil {
		unpublished = c.published.Lagging(ca)
	}
	for _, u := range unpublished {
		trust.Unpublished = append(trust.Unpublished, message.CapTo(u, validation.MaxUnpublishedLength))
	}
	if len(unpublished) == 0 && trust.PublishedTime == nil {
		t := metav1.NewTime(now)
		trust.PublishedTime = &t
	}

	waiting, total, err := c.waitingConsumers(ca.Name, next)
	if err != nil {
		return false, 0, err
	}
	trust.Consumers, trust.Waiting = int32(total), int32(len(waiting))
	trust.WaitingFor = waiting[:min(len(waiting), maxWaitingListed)]

	// The override ends the wait for consumers, propagation and rekey's
	// own publishers, not for status: what signs is always in the stored
	// status.trustBundle first, for everything that reads it.
	if trust.OverriddenTime != nil && inStatus {
		c.trustCondition(status, ca.Generation, metav1.ConditionTrue, rotationv1alpha1.ReasonOverridden,
			fmt.Sprintf("the wait for trust was overridden at %s (Prepare with force); %s", trust.OverriddenTime.UTC().Format(time.RFC3339), describeWait(trust)))
		return true, 0, nil
	}
	if len(unpublished) > 0 {
		c.trustCondition(status, ca.Generation, metav1.ConditionFalse, rotationv1alpha1.ReasonWaitingForPublication,
			"the current CA signs; the new CA is not yet in every bundle rekey publishes: "+strings.Join(unpublished, "; "))
		// The publishers' reports requeue the CA; the recheck is a net.
		return false, 10 * time.Second, nil
	}
	ends := trust.PublishedTime.Add(propagation(ca))
	if len(waiting) > 0 {
		c.trustCondition(status, ca.Generation, metav1.ConditionFalse, rotationv1alpha1.ReasonWaitingForConsumers,
			fmt.Sprintf("the current CA signs; waiting for %d of %d trust consumers to hold the new CA: %s", len(waiting), total, names(waiting)))
		// Their reports (and deletions) requeue the CA; until the
		// propagation ends the condition's reason is the consumers either
		// way, so no timer is needed.
		return false, 0, nil
	}
	if now.Before(ends) {
		c.trustCondition(status, ca.Generation, metav1.ConditionFalse, rotationv1alpha1.ReasonWaitingForPropagation,
			fmt.Sprintf("the current CA signs; the new CA is published everywhere (%s); spec.rotation.trustPropagation ends at %s",
				describeWait(trust), ends.UTC().Format(time.RFC3339)))
		return false, ends.Sub(now), nil
	}
	c.trustCondition(status, ca.Generation, metav1.ConditionTrue, rotationv1alpha1.ReasonTrusted,
		fmt.Sprintf("the new CA is trusted: published since %s, %s", trust.PublishedTime.UTC().Format(time.RFC3339), describeWait(trust)))
	return true, 0, nil
}

// waitingConsumers returns, sorted, the consumers naming the CA that do
// not report holding the certificate with fingerprint next, and how many
// name the CA.
func (c *Controller) waitingConsumers(caName, next string) ([]string, int, error) {
	if c.consumers == nil {
		return nil, 0, nil
	}
	objs, err := c.consumers.ByIndex(ConsumersByCA, caName)
	if err != nil {
		return nil, 0, fmt.Errorf("listing the trust consumers of %s: %w", caName, err)
	}
	var waiting []string
	total := 0
	for _, obj := range objs {
		tc, ok := obj.(*rotationv1alpha1.TrustConsumer)
		// One being deleted is gone for the gate, whatever finalizer
		// keeps the object (an operator's delete unblocks at once).
		if !ok || tc.DeletionTimestamp != nil {
			continue
		}
		total++
		if !holds(tc, caName, next) {
			waiting = append(waiting, tc.Name)
		}
	}
	slices.Sort(waiting)
	return waiting, total, nil
}

func describeWait(t *rotationv1alpha1.TrustStatus) string {
	if t.Consumers == 0 {
		return "no trust consumer names this CA"
	}
	return fmt.Sprintf("%d of %d trust consumers hold it", t.Consumers-t.Waiting, t.Consumers)
}

// names lists the first waited-for consumers, and how many more.
func names(waiting []string) string {
	out := strings.Join(waiting[:min(len(waiting), maxWaitingListed)], ", ")
	if len(waiting) > maxWaitingListed {
		out += fmt.Sprintf(" and %d more", len(waiting)-maxWaitingListed)
	}
	return out
}

// propagation is spec.rotation.trustPropagation (defaulted by the API).
func propagation(ca *rotationv1alpha1.CertificateAuthority) time.Duration {
	if ca.Spec.Rotation == nil || ca.Spec.Rotation.TrustPropagation == nil {
		return rotationv1alpha1.DefaultTrustPropagation
	}
	return ca.Spec.Rotation.TrustPropagation.Duration
}

func (c *Controller) trustCondition(status *rotationv1alpha1.CertificateAuthorityStatus, generation int64, s metav1.ConditionStatus, reason, msg string) {
	c.setCondition(status, metav1.Condition{Type: rotationv1alpha1.CertificateAuthorityTrustPropagated, Status: s, Reason: reason, Message: msg, ObservedGeneration: generation})
}

// enqueueConsumer queues the CAs a TrustConsumer names (before and after
// a change): its report may open a CA's gate. Reports of thousands of
// consumers arrive together; the delay gathers them into one look.
func (c *Controller) enqueueConsumer(objs ...any) {
	for _, obj := range objs {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		tc, ok := obj.(*rotationv1alpha1.TrustConsumer)
		if !ok {
			continue
		}
		for _, name := range tc.Spec.CertificateAuthorities {
			if ca, err := c.lister.Get(name); err == nil && ca.Status.Phase == rotationv1alpha1.PhasePreparing {
				c.queue.AddAfter(name, consumerBatch)
			}
		}
	}
}

// consumerBatch is how long consumer reports are gathered before the CA
// is looked at again.
const consumerBatch = 500 * time.Millisecond

// trustWriteInterval spaces the status writes of a Preparing CA whose only
// news is how many consumers hold the new CA: 5,000 consumers reporting
// within seconds would otherwise write the CA tens of times a second, and
// every write goes to everything that watches the CA (every trust-sync and
// rekey-agent). A write that changes anything else (the phase, the
// publication, the reason) is not held back.
const trustWriteInterval = 2 * time.Second

// spaceTrustWrites returns how long to hold back writing cur over old:
// more than 0 only when the difference is in the consumer counts and
// names (and the condition's message that lists them) and the CA was
// written less than trustWriteInterval ago.
func (c *Controller) spaceTrustWrites(name string, old, cur *rotationv1alpha1.CertificateAuthorityStatus) time.Duration {
	if old.Phase != rotationv1alpha1.PhasePreparing || cur.Phase != rotationv1alpha1.PhasePreparing || old.Trust == nil || cur.Trust == nil {
		return 0
	}
	strip := func(s *rotationv1alpha1.CertificateAuthorityStatus) *rotationv1alpha1.CertificateAuthorityStatus {
		s = s.DeepCopy()
		s.Trust.Consumers, s.Trust.Waiting, s.Trust.WaitingFor = 0, 0, nil
		if cond := apimeta.FindStatusCondition(s.Conditions, rotationv1alpha1.CertificateAuthorityTrustPropagated); cond != nil {
			cond.Message, cond.LastTransitionTime = "", metav1.Time{}
		}
		return s
	}
	if !equality.Semantic.DeepEqual(strip(old), strip(cur)) {
		return 0
	}
	c.lastWriteMu.Lock()
	last, ok := c.lastWrite[name]
	c.lastWriteMu.Unlock()
	if !ok {
		return 0
	}
	return trustWriteInterval - c.clock.Since(last)
}

// wroteAt records that the CA's status was just written.
func (c *Controller) wroteAt(name string) {
	c.lastWriteMu.Lock()
	defer c.lastWriteMu.Unlock()
	if c.lastWrite == nil {
		c.lastWrite = map[string]time.Time{}
	}
	c.lastWrite[name] = c.clock.Now()
}
