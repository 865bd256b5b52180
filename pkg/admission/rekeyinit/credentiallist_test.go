package rekeyinit

import (
	"context"
	"strings"
	"testing"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"rekey.io/rekey/pkg/apis/rotation"
)

// credStorage lists the RotatingCredentials of the request's namespace,
// from the watch cache only (resourceVersion "0").
type credStorage []rotation.RotatingCredential

func (credStorage) Get(context.Context, string, *metav1.GetOptions) (runtime.Object, error) {
	return nil, context.DeadlineExceeded
}
func (credStorage) NewList() runtime.Object { return &rotation.RotatingCredentialList{} }
func (s credStorage) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	if opts == nil || opts.ResourceVersion != "0" {
		return nil, context.DeadlineExceeded
	}
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	list := &rotation.RotatingCredentialList{}
	for _, rc := range s {
		if rc.Namespace == ns {
			list.Items = append(list.Items, rc)
		}
	}
	return list, nil
}
func (credStorage) ConvertToTable(context.Context, runtime.Object, runtime.Object) (*metav1.Table, error) {
	return nil, nil
}

type wantsLister struct {
	*admission.Handler
	got RotatingCredentialLister
}

func (w *wantsLister) SetRotatingCredentialLister(l RotatingCredentialLister) { w.got = l }
func (w *wantsLister) ValidateInitialization() error                          { return nil }

func TestLateCredentialGetterLists(t *testing.T) {
	l := &LateCredentialGetter{}
	if _, err := l.List(context.Background(), "team"); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("unbound lister: %v", err)
	}
	l.Bind(credStorage{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "team"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "other"}},
	})
	got, err := l.List(context.Background(), "team")
	if err != nil || len(got) != 1 || got[0].Name != "a" {
		t.Fatalf("List(team) = %v, %v", got, err)
	}
	// The initializer hands the storage-backed getter to plugins that list.
	w := &wantsLister{}
	Initializer{RotatingCredentials: l}.Initialize(w)
	if w.got != l {
		t.Fatalf("lister not handed over: %v", w.got)
	}
}
