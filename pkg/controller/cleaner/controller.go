// Package cleaner deletes requests that are finished or abandoned: pending
// ones after 24h, approved, denied or failed ones an hour after the
// condition, and any whose certificate has expired; and the issuance
// records of certificates that have expired.
package cleaner

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/pager"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/issuance"
)

// Retention periods, as kube-controller-manager's csrcleaner uses them.
const (
	PendingExpiration  = 24 * time.Hour
	FinishedExpiration = time.Hour
)

// Controller deletes expired requests. It keeps no cache: every interval
// it lists the requests a page at a time, so that the server does not hold
// a second copy of every stored request for a task that runs every few
// minutes.
type Controller struct {
	client   clientset.Interface
	clock    clock.PassiveClock
	interval time.Duration
	records  Records
}

// Records deletes issuance records (issuance.Recorder); caName "" is
// every CA.
type Records interface {
	Prune(ctx context.Context, caName string, drop func(issuance.Record) bool) (int, error)
}

// pageSize bounds what one list returns, and so what the cleaner holds.
const pageSize = 500

// NewController returns a cleaner that looks every interval; it prunes
// the issuance records of expired certificates from records too.
func NewController(client clientset.Interface, records Records, clk clock.PassiveClock, interval time.Duration) *Controller {
	return &Controller{client: client, records: records, clock: clk, interval: interval}
}

// Run cleans until ctx is done.
func (c *Controller) Run(ctx context.Context) {
	wait.UntilWithContext(ctx, c.CleanOnce, c.interval)
}

// CleanOnce deletes every request that is due, and the issuance records of
// expired certificates.
func (c *Controller) CleanOnce(ctx context.Context) {
	c.pruneRecords(ctx)
	c.cleanRequests(ctx)
}

// pruneRecords deletes the records of certificates that have expired: an
// expired certificate is trusted by no one, so a rotation never counts it
// and nothing else reads its record. Records of a CA deleted without a
// rotation go the same way, when their certificates expire.
func (c *Controller) pruneRecords(ctx context.Context) {
	now := c.clock.Now()
	n, err := c.records.Prune(ctx, "", func(r issuance.Record) bool { return now.After(r.NotAfter) })
	if err != nil {
		klog.FromContext(ctx).Error(err, "Pruning the issuance records of expired certificates", "pruned", n)
		return
	}
	if n > 0 {
		klog.FromContext(ctx).V(2).Info("Pruned the issuance records of expired certificates", "records", n)
	}
}

func (c *Controller) cleanRequests(ctx context.Context) {
	csrs := c.client.CertificatesV1alpha1().CertificateSigningRequests()
	p := pager.New(pager.SimplePageFunc(func(opts metav1.ListOptions) (runtime.Object, error) {
		return csrs.List(ctx, opts)
	}))
	// One page in memory at a time, and an expired continue token ends
	// this pass (the next one starts over) rather than listing everything
	// at once.
	p.PageSize, p.PageBufferSize, p.FullListIfExpired = pageSize, 0, false
	now := c.clock.Now()
	err := p.EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		if csr, ok := obj.(*certv1alpha1.CertificateSigningRequest); ok {
			c.clean(ctx, csr, now)
		}
		return nil
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing requests to clean")
	}
}

func (c *Controller) clean(ctx context.Context, csr *certv1alpha1.CertificateSigningRequest, now time.Time) {
	why, due := Due(csr, now)
	if !due {
		return
	}
	uid := csr.UID
	err := c.client.CertificatesV1alpha1().CertificateSigningRequests().Delete(ctx, csr.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.FromContext(ctx).Error(err, "Deleting request", "csr", csr.Name)
		return
	}
	klog.FromContext(ctx).V(2).Info("Deleted request", "csr", csr.Name, "why", why)
}

// Due says whether a request should be deleted now, and why.
func Due(csr *certv1alpha1.CertificateSigningRequest, now time.Time) (string, bool) {
	if len(csr.Status.Certificate) > 0 {
		if certs, err := validation.ParseCertificateChain(csr.Status.Certificate); err == nil && now.After(certs[0].NotAfter) {
			return "certificate expired", true
		}
	}
	for _, t := range []certv1alpha1.RequestConditionType{certv1alpha1.CertificateApproved, certv1alpha1.CertificateDenied, certv1alpha1.CertificateFailed} {
		if cond := certv1alpha1.GetCondition(csr, t); cond != nil {
			at := cond.LastUpdateTime.Time
			if at.IsZero() {
				at = csr.CreationTimestamp.Time
			}
			if now.Sub(at) > FinishedExpiration {
				return string(t) + " more than an hour ago", true
			}
		}
	}
	if certv1alpha1.IsPending(csr) && now.Sub(csr.CreationTimestamp.Time) > PendingExpiration {
		return "pending for more than 24h", true
	}
	return "", false
}
