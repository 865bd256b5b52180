package rekeyinit

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apis/rotation"
)

// cached answers only reads the watch cache serves (resourceVersion "0").
type cached map[string]runtime.Object

func (s cached) Get(_ context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	if opts == nil || opts.ResourceVersion != "0" {
		return nil, context.DeadlineExceeded
	}
	return s[name], nil
}

type wantsSigners struct {
	*admission.Handler
	got SignerGetter
}

func (w *wantsSigners) SetSigners(g SignerGetter)     { w.got = g }
func (w *wantsSigners) ValidateInitialization() error { return nil }

func TestLateSignerGetter(t *testing.T) {
	l := &LateSignerGetter{}
	if _, err := l.Get(context.Background(), "s"); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("unbound getter: %v", err)
	}
	l.Bind(cached{"s": &certificates.Signer{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, "odd": &rotation.Rotation{}})
	s, err := l.Get(context.Background(), "s")
	if err != nil || s.Name != "s" {
		t.Fatalf("bound getter: %+v %v", s, err)
	}
	if _, err := l.Get(context.Background(), "odd"); err == nil || !strings.Contains(err.Error(), "not a Signer") {
		t.Fatalf("wrong type: %v", err)
	}
	w := &wantsSigners{}
	Initializer{Signers: l}.Initialize(w)
	if w.got != l {
		t.Fatal("the plugin did not get the Signer getter")
	}
}
