package manager

import (
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"

	certinformers "rekey.io/rekey/pkg/generated/informers/externalversions/certificates/v1alpha1"
	rotationinformers "rekey.io/rekey/pkg/generated/informers/externalversions/rotation/v1alpha1"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
)

// borrowed is a shared informer lent to one leadership term: it records
// the handlers the term's controllers add, and end removes them. The
// informer itself keeps running (the request path reads it); only the
// term's handlers go.
type borrowed struct {
	cache.SharedIndexInformer

	mu   sync.Mutex
	regs []cache.ResourceEventHandlerRegistration
}

func (b *borrowed) keep(reg cache.ResourceEventHandlerRegistration, err error) (cache.ResourceEventHandlerRegistration, error) {
	if err == nil {
		b.mu.Lock()
		b.regs = append(b.regs, reg)
		b.mu.Unlock()
	}
	return reg, err
}

func (b *borrowed) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return b.keep(b.SharedIndexInformer.AddEventHandler(h))
}

func (b *borrowed) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return b.keep(b.SharedIndexInformer.AddEventHandlerWithResyncPeriod(h, resync))
}

func (b *borrowed) AddEventHandlerWithOptions(h cache.ResourceEventHandler, opts cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return b.keep(b.SharedIndexInformer.AddEventHandlerWithOptions(h, opts))
}

// end removes every handler added through b.
func (b *borrowed) end() {
	b.mu.Lock()
	regs := b.regs
	b.regs = nil
	b.mu.Unlock()
	for _, r := range regs {
		_ = b.SharedIndexInformer.RemoveEventHandler(r)
	}
}

type borrowedCAs struct {
	inf    *borrowed
	lister rotationlisters.CertificateAuthorityLister
}

func borrowCAs(i rotationinformers.CertificateAuthorityInformer) borrowedCAs {
	return borrowedCAs{inf: &borrowed{SharedIndexInformer: i.Informer()}, lister: i.Lister()}
}

func (b borrowedCAs) Informer() cache.SharedIndexInformer                { return b.inf }
func (b borrowedCAs) Lister() rotationlisters.CertificateAuthorityLister { return b.lister }

type borrowedSigners struct {
	inf    *borrowed
	lister certlisters.SignerLister
}

func borrowSigners(i certinformers.SignerInformer) borrowedSigners {
	return borrowedSigners{inf: &borrowed{SharedIndexInformer: i.Informer()}, lister: i.Lister()}
}

func (b borrowedSigners) Informer() cache.SharedIndexInformer { return b.inf }
func (b borrowedSigners) Lister() certlisters.SignerLister    { return b.lister }

type borrowedRevocations struct {
	inf    *borrowed
	lister certlisters.RevocationLister
}

func borrowRevocations(i certinformers.RevocationInformer) borrowedRevocations {
	return borrowedRevocations{inf: &borrowed{SharedIndexInformer: i.Informer()}, lister: i.Lister()}
}

func (b borrowedRevocations) Informer() cache.SharedIndexInformer  { return b.inf }
func (b borrowedRevocations) Lister() certlisters.RevocationLister { return b.lister }
