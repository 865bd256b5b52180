package rotate

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"rekey.io/rekey/pkg/apis/rotation"
)

// noStrategy stands in for a kind's strategy: these tests never reach the
// store.
type noStrategy struct{ rest.RESTUpdateStrategy }

func (noStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set { return nil }

// The subresource says it takes Rotations, and refuses what is not a
// valid Rotation, or what admission refuses, before the transition runs.
func TestCreateRefusesBeforeTheTransition(t *testing.T) {
	called := false
	transition := func(runtime.Object, *rotation.Rotation, metav1.Time) (runtime.Object, error) {
		called = true
		return nil, errors.New("not reached")
	}
	r := NewREST(&genericregistry.Store{}, noStrategy{}, nil, transition)
	if gvk := r.GroupVersionKind(schema.GroupVersion{Group: "rotation.rekey.io", Version: "v1alpha1"}); gvk.Kind != "Rotation" {
		t.Fatalf("kind %v", gvk)
	}
	if _, ok := r.New().(*rotation.Rotation); !ok {
		t.Fatal("New does not make a Rotation")
	}
	for _, rot := range []*rotation.Rotation{{Action: "Restart"}, {Action: rotation.RotationStart, Force: true}} {
		if _, err := r.Create(context.Background(), "x", rot, nil, nil); !apierrors.IsInvalid(err) {
			t.Errorf("%+v: %v, want 422", rot, err)
		}
	}
	if _, err := r.Create(context.Background(), "x", &rotation.CertificateAuthority{}, nil, nil); !apierrors.IsBadRequest(err) {
		t.Errorf("not a Rotation: %v, want 400", err)
	}
	deny := func(context.Context, runtime.Object) error {
		return apierrors.NewConflict(rotation.Resource("certificateauthorities"), "x", errors.New("phase"))
	}
	if _, err := r.Create(context.Background(), "x", &rotation.Rotation{Action: rotation.RotationStart}, deny, nil); !apierrors.IsConflict(err) {
		t.Errorf("admission refused: %v, want its 409", err)
	}
	if called {
		t.Fatal("the transition ran for a refused request")
	}
}
