// Package rekeyinit hands rekey's own objects to the admission plugins that
// need them (sample-apiserver's admission initializer pattern): a plugin
// that implements WantsCertificateAuthorities gets a getter that reads
// CertificateAuthorities from storage, not from a cache, so that a check
// of a CA's phase sees the phase as it is.
package rekeyinit

import (
	"context"
	"fmt"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"rekey.io/rekey/pkg/apis/rotation"
)

// CertificateAuthorityGetter reads a CertificateAuthority.
type CertificateAuthorityGetter interface {
	Get(ctx context.Context, name string) (*rotation.CertificateAuthority, error)
}

// WantsCertificateAuthorities is implemented by plugins that read CAs.
type WantsCertificateAuthorities interface {
	SetCertificateAuthorities(CertificateAuthorityGetter)
	admission.InitializationValidator
}

// Initializer hands the getter to the plugins that want it.
type Initializer struct {
	CertificateAuthorities CertificateAuthorityGetter
	RotatingCredentials    RotatingCredentialGetter
	Signers                SignerGetter
}

var _ admission.PluginInitializer = Initializer{}

// Initialize implements admission.PluginInitializer.
func (i Initializer) Initialize(plugin admission.Interface) {
	if w, ok := plugin.(WantsCertificateAuthorities); ok {
		w.SetCertificateAuthorities(i.CertificateAuthorities)
	}
	if w, ok := plugin.(WantsRotatingCredentials); ok {
		w.SetRotatingCredentials(i.RotatingCredentials)
	}
	// The storage-backed getter lists too (LateCredentialGetter.List).
	if w, ok := plugin.(WantsRotatingCredentialLister); ok {
		if l, ok := i.RotatingCredentials.(RotatingCredentialLister); ok {
			w.SetRotatingCredentialLister(l)
		}
	}
	if w, ok := plugin.(WantsSigners); ok {
		w.SetSigners(i.Signers)
	}
}

// StorageGetter is what a registry store offers.
type StorageGetter interface {
	Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error)
}

// late is storage set after the admission chain is built: the chain is
// part of the server's configuration, the storage is made when the server
// is assembled.
type late[T runtime.Object] struct {
	storage atomic.Pointer[StorageGetter]
}

// Bind sets the storage.
func (l *late[T]) Bind(s StorageGetter) { l.storage.Store(&s) }

// get reads one object of the bound storage (ctx carries the namespace of
// a namespaced kind).
func (l *late[T]) get(ctx context.Context, kind, name string) (T, error) {
	var zero T
	s := l.storage.Load()
	if s == nil {
		return zero, fmt.Errorf("%s storage is not ready yet", kind)
	}
	obj, err := (*s).Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return zero, err
	}
	out, ok := obj.(T)
	if !ok {
		return zero, fmt.Errorf("storage returned %T, not a %s", obj, kind)
	}
	return out, nil
}

// LateGetter is a CertificateAuthorityGetter bound to its storage late.
type LateGetter struct {
	late[*rotation.CertificateAuthority]
}

// Get implements CertificateAuthorityGetter.
func (l *LateGetter) Get(ctx context.Context, name string) (*rotation.CertificateAuthority, error) {
	return l.get(ctx, "CertificateAuthority", name)
}

// RotatingCredentialGetter reads a RotatingCredential.
type RotatingCredentialGetter interface {
	Get(ctx context.Context, namespace, name string) (*rotation.RotatingCredential, error)
}

// WantsRotatingCredentials is implemented by plugins that read
// RotatingCredentials.
type WantsRotatingCredentials interface {
	SetRotatingCredentials(RotatingCredentialGetter)
	admission.InitializationValidator
}

// LateCredentialGetter is a RotatingCredentialGetter bound to its storage
// late.
type LateCredentialGetter struct {
	late[*rotation.RotatingCredential]
}

// Get implements RotatingCredentialGetter.
func (l *LateCredentialGetter) Get(ctx context.Context, namespace, name string) (*rotation.RotatingCredential, error) {
	return l.get(genericapirequest.WithNamespace(ctx, namespace), "RotatingCredential", name)
}
