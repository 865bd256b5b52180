// Package csrcontroller is the loop every controller that acts on
// CertificateSigningRequests shares, after kube-controller-manager's
// certificates.CertificateController: an informer feeds request names that
// pass a filter into a rate-limited queue, and workers call a handler with
// the request from the lister. The handler holds the controller's logic
// and is unit-tested on its own.
package csrcontroller

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	certinformers "rekey.io/rekey/pkg/generated/informers/externalversions/certificates/v1alpha1"
	"rekey.io/rekey/pkg/runner"
)

// Handler acts on one request. An error retries it with back-off. The
// request is the lister's copy: a handler must not modify it.
type Handler func(ctx context.Context, csr *certv1alpha1.CertificateSigningRequest) error

// Controller runs a Handler for every request that passes Filter.
type Controller struct {
	name    string
	get     func(name string) (*certv1alpha1.CertificateSigningRequest, error)
	list    func() ([]*certv1alpha1.CertificateSigningRequest, error)
	synced  cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]
	filter  func(*certv1alpha1.CertificateSigningRequest) bool
	handler Handler
}

// New wires a controller to the request informer. filter picks the
// requests the handler wants to see; it is checked again before each call.
func New(name string, informer certinformers.CertificateSigningRequestInformer, filter func(*certv1alpha1.CertificateSigningRequest) bool, handler Handler) *Controller {
	lister := informer.Lister()
	c := NewFromSource(name, lister.Get, func() ([]*certv1alpha1.CertificateSigningRequest, error) { return lister.List(labels.Everything()) },
		informer.Informer().HasSynced, filter, handler)
	_, _ = informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.Enqueue,
		UpdateFunc: func(_, obj any) { c.Enqueue(obj) },
	})
	return c
}

// NewFromSource is New for requests that do not come from one informer:
// get and list read them wherever they are cached (get returns a NotFound
// error for a request that is not), and the caller feeds Enqueue.
func NewFromSource(name string, get func(name string) (*certv1alpha1.CertificateSigningRequest, error),
	list func() ([]*certv1alpha1.CertificateSigningRequest, error), synced cache.InformerSynced,
	filter func(*certv1alpha1.CertificateSigningRequest) bool, handler Handler) *Controller {
	return &Controller{
		name:    name,
		get:     get,
		list:    list,
		synced:  synced,
		queue:   runner.NewQueue[string](name),
		filter:  filter,
		handler: handler,
	}
}

// Enqueue queues a request (an informer's object) if it passes the filter.
func (c *Controller) Enqueue(obj any) {
	if csr, ok := obj.(*certv1alpha1.CertificateSigningRequest); ok && c.filter(csr) {
		c.queue.Add(csr.Name)
	}
}

// EnqueueMatching queues every cached request that passes the filter and
// match: for when something a request waits on (its Signer, its CA)
// changed.
func (c *Controller) EnqueueMatching(match func(*certv1alpha1.CertificateSigningRequest) bool) {
	csrs, err := c.list()
	if err != nil {
		return
	}
	for _, csr := range csrs {
		if c.filter(csr) && match(csr) {
			c.queue.Add(csr.Name)
		}
	}
}

// Run handles requests with the given number of workers until ctx is done.
// extraSynced are other informers the handler reads.
func (c *Controller) Run(ctx context.Context, workers int, extraSynced ...cache.InformerSynced) {
	synced := append([]cache.InformerSynced{c.synced}, extraSynced...)
	runner.Run(ctx, c.name, c.queue, synced, workers, func(ctx context.Context, name string) (time.Duration, error) {
		csr, err := c.get(name)
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		if err != nil || !c.filter(csr) {
			return 0, err
		}
		return 0, c.handler(ctx, csr)
	})
}
