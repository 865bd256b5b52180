// Package revocation is the leader's controller of Revocations: it marks
// the revoked certificate's rekey CertificateSigningRequest with the
// Revoked condition, deletes a revocation some time after its certificate
// has expired (nothing trusts it then, and its issuance record is gone),
// and deletes the revocations of a CA key a rotation destroyed (DeleteOfKey,
// called by the CA controller where it prunes that key's records).
package revocation

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/message"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	certinformers "rekey.io/rekey/pkg/generated/informers/externalversions/certificates/v1alpha1"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/runner"
)

// ExpiryMargin is how long a revocation outlives its certificate's
// notAfter: a client clock a little behind, or a CRL issued just before
// the expiry, still sees it.
const ExpiryMargin = time.Hour

// recentWindow bounds the revocations whose request and record are looked
// at: a rekey request is deleted an hour after its approval (cleaner), and
// a revocation made during a rotation's sweep (DeleteOfKey) is seen here
// within seconds. Older ones cost no reads when a term starts with many.
const recentWindow = 6 * time.Hour

// Records finds the record of a certificate (issuance.Recorder).
type Records interface {
	BySerial(ctx context.Context, caName, serialHex string) (issuance.Record, bool, error)
}

// Controller keeps revocations and their requests in step.
type Controller struct {
	client  clientset.Interface
	lister  certlisters.RevocationLister
	synced  cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]
	records Records
	clock   clock.PassiveClock
	// delete removes one revocation (the generated client has no delete:
	// clients may not; rekey's controllers may).
	delete func(ctx context.Context, name string, uid types.UID) error

	mu sync.Mutex
	// looked are the revocations whose record was looked at this term.
	looked map[string]bool
}

// NewController watches revocations through informer; records (may be
// nil) finds whether a revocation's certificate still has a record.
func NewController(client clientset.Interface, informer certinformers.RevocationInformer, records Records, clk clock.PassiveClock) *Controller {
	c := &Controller{
		client:  client,
		lister:  informer.Lister(),
		synced:  informer.Informer().HasSynced,
		queue:   runner.NewQueue[string]("revocation"),
		records: records,
		clock:   clk,
		looked:  map[string]bool{},
	}
	c.delete = func(ctx context.Context, name string, uid types.UID) error {
		return deleteRevocation(ctx, client, name, uid)
	}
	_, _ = informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
	})
	return c
}

func (c *Controller) enqueue(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// Run runs workers until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	runner.Run(ctx, "revocation", c.queue, []cache.InformerSynced{c.synced}, workers, c.sync)
}

func (c *Controller) sync(ctx context.Context, name string) (time.Duration, error) {
	rev, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		c.forget(name)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	logger := klog.FromContext(ctx).WithValues("revocation", name)
	now := c.clock.Now()
	due := rev.Status.NotAfter.Add(ExpiryMargin)
	if !now.Before(due) {
		if err := c.delete(ctx, name, rev.UID); err != nil {
			return 0, fmt.Errorf("deleting revocation %s of an expired certificate: %w", name, err)
		}
		c.forget(name)
		logger.V(2).Info("Deleted the revocation of an expired certificate", "notAfter", rev.Status.NotAfter)
		return 0, nil
	}
	if now.Sub(rev.Status.RevocationTime.Time) < recentWindow {
		gone, err := c.keyDestroyed(ctx, rev, now)
		if err != nil {
			return 0, err
		}
		if gone {
			if err := c.delete(ctx, name, rev.UID); err != nil {
				return 0, fmt.Errorf("deleting revocation %s of a destroyed CA key: %w", name, err)
			}
			c.forget(name)
			logger.Info("Deleted the revocation of a certificate whose CA key was destroyed", "caName", rev.Status.CAName, "caKeyID", rev.Status.CAKeyID)
			return 0, nil
		}
		if err := c.markRequest(ctx, rev); err != nil {
			return 0, err
		}
	}
	return due.Sub(now), nil
}

func (c *Controller) forget(name string) {
	c.mu.Lock()
	delete(c.looked, name)
	c.mu.Unlock()
}

// keyDestroyed says whether the certificate's record is gone before its
// expiry: records go only when the certificate expires (cleaner) or its
// CA key is destroyed, so such a revocation is of a destroyed key, one
// created while a rotation's DeleteOfKey ran. Looked at once per term.
func (c *Controller) keyDestroyed(ctx context.Context, rev *certv1alpha1.Revocation, now time.Time) (bool, error) {
	if c.records == nil || !now.Before(rev.Status.NotAfter.Time) {
		return false, nil
	}
	c.mu.Lock()
	looked := c.looked[rev.Name]
	c.mu.Unlock()
	if looked {
		return false, nil
	}
	rec, found, err := c.records.BySerial(ctx, rev.Status.CAName, rev.Status.SerialNumber)
	if err != nil {
		return false, fmt.Errorf("reading the record of revoked certificate %s: %w", rev.Name, err)
	}
	c.mu.Lock()
	c.looked[rev.Name] = true
	c.mu.Unlock()
	return !found || rec.CAKeyID != rev.Status.CAKeyID, nil
}

// markRequest adds the Revoked condition to the rekey request the
// certificate was issued for, if it still exists (the same UID).
func (c *Controller) markRequest(ctx context.Context, rev *certv1alpha1.Revocation) error {
	req := rev.Status.Request
	if req == "" || strings.Contains(req, ":") {
		// Not a rekey request (the host cluster's CSRs and
		// PodCertificateRequests are "<kind>:<name>").
		return nil
	}
	csrs := c.client.CertificatesV1alpha1().CertificateSigningRequests()
	csr, err := csrs.Get(ctx, req, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading request %s of revoked certificate %s: %w", req, rev.Name, err)
	}
	if string(csr.UID) != rev.Status.RequestUID || certv1alpha1.GetCondition(csr, certv1alpha1.CertificateRevoked) != nil {
		return nil
	}
	now := metav1.NewTime(c.clock.Now())
	csr.Status.Conditions = append(csr.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
		Type: certv1alpha1.CertificateRevoked, Status: metav1.ConditionTrue, Reason: string(rev.Spec.Reason),
		Message:        message.Cap(fmt.Sprintf("revoked by %s at %s (Revocation %s)", rev.Status.RevokedBy, rev.Status.RevocationTime.UTC().Format(time.RFC3339), rev.Name)),
		LastUpdateTime: now, LastTransitionTime: now,
	})
	if _, err := csrs.UpdateStatus(ctx, csr, metav1.UpdateOptions{FieldManager: "rekey-revocation"}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("marking request %s revoked: %w", req, err)
	}
	klog.FromContext(ctx).V(2).Info("Marked request revoked", "csr", req, "revocation", rev.Name)
	return nil
}

// deleteRevocation deletes one revocation as rekey's controllers, only
// the object seen (uid).
func deleteRevocation(ctx context.Context, client clientset.Interface, name string, uid types.UID) error {
	opts := &metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := client.CertificatesV1alpha1().RESTClient().Delete().Resource("revocations").Name(name).Body(opts).Do(ctx).Error()
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// Pruner deletes the revocations of a destroyed CA key.
type Pruner struct {
	Client clientset.Interface
}

// pageSize bounds what one list returns.
const pageSize = 500

// DeleteOfKey deletes every revocation of certificates signed by CA key
// keyID of caName, listing them a page at a time from storage (not a
// cache: one made just before must not be missed). One made while this
// runs is caught by the controller (its record is gone).
func (p Pruner) DeleteOfKey(ctx context.Context, caName, keyID string) (int, error) {
	revs := p.Client.CertificatesV1alpha1().Revocations()
	pg := pager.New(pager.SimplePageFunc(func(opts metav1.ListOptions) (runtime.Object, error) {
		return revs.List(ctx, opts)
	}))
	pg.PageSize, pg.PageBufferSize = pageSize, 0
	var names []string
	var uids []types.UID
	err := pg.EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		if r, ok := obj.(*certv1alpha1.Revocation); ok && r.Status.CAName == caName && r.Status.CAKeyID == keyID {
			names, uids = append(names, r.Name), append(uids, r.UID)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("listing the revocations of CA key %s: %w", keyID, err)
	}
	for i, name := range names {
		if err := deleteRevocation(ctx, p.Client, name, uids[i]); err != nil {
			return i, fmt.Errorf("deleting revocation %s of destroyed CA key %s: %w", name, keyID, err)
		}
	}
	return len(names), nil
}
