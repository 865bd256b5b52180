package rekeyinit

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"rekey.io/rekey/pkg/apis/rotation"
)

type storage map[string]runtime.Object

func (s storage) Get(_ context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	return s[name], nil
}

type wants struct {
	*admission.Handler
	got CertificateAuthorityGetter
}

func (w *wants) SetCertificateAuthorities(g CertificateAuthorityGetter) { w.got = g }
func (w *wants) ValidateInitialization() error                          { return nil }

func TestLateGetter(t *testing.T) {
	l := &LateGetter{}
	if _, err := l.Get(context.Background(), "ca"); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("unbound getter: %v", err)
	}
	l.Bind(storage{"ca": &rotation.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "ca"}}, "odd": &rotation.Rotation{}})
	ca, err := l.Get(context.Background(), "ca")
	if err != nil || ca.Name != "ca" {
		t.Fatalf("bound getter: %+v %v", ca, err)
	}
	if _, err := l.Get(context.Background(), "odd"); err == nil || !strings.Contains(err.Error(), "not a CertificateAuthority") {
		t.Fatalf("wrong type: %v", err)
	}
}

func TestInitializerHandsOverTheGetter(t *testing.T) {
	l := &LateGetter{}
	w := &wants{}
	Initializer{CertificateAuthorities: l}.Initialize(w)
	if w.got != l {
		t.Fatal("the plugin did not get the getter")
	}
	// Plugins that do not want it are left alone.
	Initializer{CertificateAuthorities: l}.Initialize(admission.NewHandler(admission.Create))
}

// namespaced answers with the namespace the request context carries.
type namespaced struct{}

func (namespaced) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	return &rotation.RotatingCredential{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, nil
}

func TestLateCredentialGetter(t *testing.T) {
	l := &LateCredentialGetter{}
	if _, err := l.Get(context.Background(), "team", "db"); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("unbound getter: %v", err)
	}
	l.Bind(namespaced{})
	rc, err := l.Get(context.Background(), "team", "db")
	if err != nil || rc.Namespace != "team" || rc.Name != "db" {
		t.Fatalf("bound getter: %+v %v", rc, err)
	}
	l.Bind(storage{"odd": &rotation.Rotation{}})
	if _, err := l.Get(context.Background(), "team", "odd"); err == nil || !strings.Contains(err.Error(), "not a RotatingCredential") {
		t.Fatalf("wrong type: %v", err)
	}
}
