package rekeyinit

import (
	"context"
	"fmt"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apiserver/pkg/admission"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"rekey.io/rekey/pkg/apis/rotation"
)

// RotatingCredentialLister lists the RotatingCredentials of a namespace.
type RotatingCredentialLister interface {
	List(ctx context.Context, namespace string) ([]*rotation.RotatingCredential, error)
}

// WantsRotatingCredentialLister is implemented by plugins that list
// RotatingCredentials.
type WantsRotatingCredentialLister interface {
	SetRotatingCredentialLister(RotatingCredentialLister)
	admission.InitializationValidator
}

var _ RotatingCredentialLister = &LateCredentialGetter{}

// List implements RotatingCredentialLister from the watch cache
// (resourceVersion "0"): its reader refuses a second RotatingCredential on
// a Secret, a check two creates in the same moment can pass anyway, so a
// cache a moment old costs nothing and saves an etcd range read per
// create.
func (l *LateCredentialGetter) List(ctx context.Context, namespace string) ([]*rotation.RotatingCredential, error) {
	s := l.storage.Load()
	if s == nil {
		return nil, fmt.Errorf("RotatingCredential storage is not ready yet")
	}
	lister, ok := (*s).(rest.Lister)
	if !ok {
		return nil, fmt.Errorf("RotatingCredential storage %T does not list", *s)
	}
	obj, err := lister.List(genericapirequest.WithNamespace(ctx, namespace), &metainternalversion.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	list, ok := obj.(*rotation.RotatingCredentialList)
	if !ok {
		return nil, fmt.Errorf("storage listed %T, not a RotatingCredentialList", obj)
	}
	out := make([]*rotation.RotatingCredential, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}
