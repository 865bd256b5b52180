package certificateauthority

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/registry/rotation/rotate"
	"rekey.io/rekey/pkg/signing/keystorepaths"
)

// The rotate subresource refuses invalid Rotations before anything else
// and says it takes Rotations.
func TestRotateRESTRefusesInvalidRotations(t *testing.T) {
	r := rotate.NewREST(&genericregistry.Store{}, rotateStrategy{}, nil, transition)
	if gvk := r.GroupVersionKind(schema.GroupVersion{Group: "rotation.rekey.io", Version: "v1alpha1"}); gvk.Kind != "Rotation" {
		t.Fatalf("kind %v", gvk)
	}
	if _, ok := r.New().(*rotation.Rotation); !ok {
		t.Fatal("New does not make a Rotation")
	}
	for _, rot := range []*rotation.Rotation{{Action: "Restart"}, {Action: rotation.RotationStart, Force: true}} {
		_, err := r.Create(context.Background(), "ca", rot, nil, nil)
		if !apierrors.IsInvalid(err) {
			t.Errorf("%+v: %v, want 422", rot, err)
		}
	}
}

// The rotate strategy keeps spec and metadata: only the phase and its
// times move.
func TestRotateStrategyKeepsSpec(t *testing.T) {
	s := rotateStrategy{NewStrategy(runtime.NewScheme(), keystorepaths.Allowed{})}
	old := newCA()
	updated := old.DeepCopy()
	updated.Spec.CommonName = "changed"
	updated.Labels = map[string]string{"x": "y"}
	updated.Status.Phase = rotation.PhasePreparing
	s.PrepareForUpdate(context.Background(), updated, old)
	if updated.Spec.CommonName != "team" || updated.Labels != nil || updated.Status.Phase != rotation.PhasePreparing {
		t.Fatalf("%+v", updated)
	}
	if errs := s.ValidateUpdate(context.Background(), updated, old); len(errs) != 0 {
		t.Fatalf("a phase change refused: %v", errs)
	}
}
