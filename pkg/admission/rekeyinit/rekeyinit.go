// Package rekeyinit hands rekey's own objects to the admission plugins that
// need them (sample-apiserver's admission initializer pattern): a plugin
// that implements WantsCertificateAuthorities gets a getter that reads
// CertificateAuthorities from storage, not from a cache, so that a check
// of a CA's phase sees the phase as it is.
package rekeyinit

import (
	"context"
	"errors"
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
}

// StorageGetter is what a registry store offers.
type StorageGetter interface {
	Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error)
}

// LateGetter is a getter whose storage is set after the admission chain is
// built: the chain is part of the server's configuration, the storage is
// made when the server is assembled.
type LateGetter struct {
	storage atomic.Pointer[StorageGetter]
}

// Bind sets the storage.
func (l *LateGetter) Bind(s StorageGetter) { l.storage.Store(&s) }

// Get implements CertificateAuthorityGetter.
func (l *LateGetter) Get(ctx context.Context, name string) (*rotation.CertificateAuthority, error) {
	s := l.storage.Load()
	if s == nil {
		return nil, errors.New("certificate authority storage is not ready yet")
	}
	obj, err := (*s).Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	ca, ok := obj.(*rotation.CertificateAuthority)
	if !ok {
		return nil, fmt.Errorf("storage returned %T, not a CertificateAuthority", obj)
	}
	return ca, nil
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

// LateCredentialGetter is LateGetter for RotatingCredentials.
type LateCredentialGetter struct {
	storage atomic.Pointer[StorageGetter]
}

// Bind sets the storage.
func (l *LateCredentialGetter) Bind(s StorageGetter) { l.storage.Store(&s) }

// Get implements RotatingCredentialGetter.
func (l *LateCredentialGetter) Get(ctx context.Context, namespace, name string) (*rotation.RotatingCredential, error) {
	s := l.storage.Load()
	if s == nil {
		return nil, errors.New("rotating credential storage is not ready yet")
	}
	obj, err := (*s).Get(genericapirequest.WithNamespace(ctx, namespace), name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	rc, ok := obj.(*rotation.RotatingCredential)
	if !ok {
		return nil, fmt.Errorf("storage returned %T, not a RotatingCredential", obj)
	}
	return rc, nil
}
