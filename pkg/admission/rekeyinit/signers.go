package rekeyinit

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"

	"rekey.io/rekey/pkg/apis/certificates"
)

// SignerGetter reads a Signer by object name.
type SignerGetter interface {
	Get(ctx context.Context, name string) (*certificates.Signer, error)
}

// WantsSigners is implemented by plugins that read Signers.
type WantsSigners interface {
	SetSigners(SignerGetter)
	admission.InitializationValidator
}

// LateSignerGetter is a SignerGetter bound to its storage late. Unlike the
// CA getter it reads the watch cache (resourceVersion "0"): its readers
// only warn, on every create of a request, and a Signer a moment old is
// good enough for that and costs no etcd read.
type LateSignerGetter struct {
	late[*certificates.Signer]
}

// Get implements SignerGetter.
func (l *LateSignerGetter) Get(ctx context.Context, name string) (*certificates.Signer, error) {
	s := l.storage.Load()
	if s == nil {
		return nil, errors.New("the Signer storage is not ready yet")
	}
	obj, err := (*s).Get(ctx, name, &metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	out, ok := obj.(*certificates.Signer)
	if !ok {
		return nil, fmt.Errorf("storage returned %T, not a Signer", obj)
	}
	return out, nil
}
