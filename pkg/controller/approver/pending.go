package approver

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	certinformers "rekey.io/rekey/pkg/generated/informers/externalversions/certificates/v1alpha1"
	"rekey.io/rekey/pkg/issuer"
)

// pendingRequests caches the pending requests of the signers that approve
// without a person (issuer.AutoApproves), one informer per such signer (field selector
// state=Pending,spec.signerName=NAME): the requests of Manual signers are
// never sent to the controller nor kept by it, however many wait for a
// person. A signer that starts approving without a person gets its
// informer, which lists what waits already; one that stops loses it.
type pendingRequests struct {
	client    clientset.Interface
	transform cache.TransformFunc
	// changed is called with every pending request of a watched signer
	// that is added or updated.
	changed func(obj any)

	mu       sync.Mutex
	ctx      context.Context // nil until run
	bySigner map[string]*signerRequests
}

type signerRequests struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc // nil until started
}

func newPendingRequests(client clientset.Interface, transform cache.TransformFunc, changed func(obj any)) *pendingRequests {
	return &pendingRequests{client: client, transform: transform, changed: changed, bySigner: map[string]*signerRequests{}}
}

// signerHandler keeps the set of informers in step with the Signers.
func (p *pendingRequests) signerHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.signerChanged(obj) },
		UpdateFunc: func(_, obj any) { p.signerChanged(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if s, ok := obj.(*certv1alpha1.Signer); ok {
				p.unwatch(s.Spec.SignerName)
			}
		},
	}
}

func (p *pendingRequests) signerChanged(obj any) {
	s, ok := obj.(*certv1alpha1.Signer)
	if !ok {
		return
	}
	if issuer.AutoApproves(s) {
		p.watch(s.Spec.SignerName)
	} else {
		p.unwatch(s.Spec.SignerName)
	}
}

func (p *pendingRequests) watch(signerName string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.bySigner[signerName]; ok {
		return
	}
	selector := fields.AndSelectors(
		fields.OneTermEqualSelector(certv1alpha1.StateField, certv1alpha1.StatePending),
		fields.OneTermEqualSelector(certv1alpha1.SignerNameField, signerName),
	).String()
	informer := certinformers.NewFilteredCertificateSigningRequestInformer(p.client, 10*time.Minute, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = selector })
	if p.transform != nil {
		_ = informer.SetTransform(p.transform)
	}
	// The server filters; this filter is for a server (or a fake) that
	// would not.
	ours := func(obj any) bool {
		csr, ok := obj.(*certv1alpha1.CertificateSigningRequest)
		return ok && csr.Spec.SignerName == signerName && certv1alpha1.IsPending(csr)
	}
	_, _ = informer.AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: ours,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    p.changed,
			UpdateFunc: func(_, obj any) { p.changed(obj) },
		},
	})
	r := &signerRequests{informer: informer}
	p.bySigner[signerName] = r
	if p.ctx != nil {
		p.start(r)
	}
}

func (p *pendingRequests) unwatch(signerName string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.bySigner[signerName]; ok {
		if r.stop != nil {
			r.stop()
		}
		delete(p.bySigner, signerName)
	}
}

// start runs an informer until it is unwatched or ctx ends; p.mu is held.
func (p *pendingRequests) start(r *signerRequests) {
	ctx, cancel := context.WithCancel(p.ctx)
	r.stop = cancel
	go r.informer.RunWithContext(ctx)
}

// run starts the informers of the signers seen so far, and those of the
// signers seen later as they come, until ctx is done.
func (p *pendingRequests) run(ctx context.Context) {
	p.mu.Lock()
	p.ctx = ctx
	for _, r := range p.bySigner {
		p.start(r)
	}
	p.mu.Unlock()
}

// get returns a cached pending request, or NotFound.
func (p *pendingRequests) get(name string) (*certv1alpha1.CertificateSigningRequest, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.bySigner {
		if obj, ok, _ := r.informer.GetStore().GetByKey(name); ok {
			if csr, ok := obj.(*certv1alpha1.CertificateSigningRequest); ok {
				return csr, nil
			}
		}
	}
	return nil, apierrors.NewNotFound(certv1alpha1.Resource("certificatesigningrequests"), name)
}

// list returns every cached pending request.
func (p *pendingRequests) list() ([]*certv1alpha1.CertificateSigningRequest, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*certv1alpha1.CertificateSigningRequest
	for _, r := range p.bySigner {
		for _, obj := range r.informer.GetStore().List() {
			if csr, ok := obj.(*certv1alpha1.CertificateSigningRequest); ok {
				out = append(out, csr)
			}
		}
	}
	return out, nil
}

// cached is how many requests the informers keep, and for how many signers.
func (p *pendingRequests) cached() (requests, signers int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.bySigner {
		requests += len(r.informer.GetStore().ListKeys())
	}
	return requests, len(p.bySigner)
}
