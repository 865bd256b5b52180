// Package rotate serves the rotate subresource that CertificateAuthorities
// and RotatingCredentials share: a POSTed Rotation is validated, then
// applied to the stored object by the kind's transition inside the
// storage's compare-and-swap, so that two concurrent requests are decided
// one after the other on the object as it is.
package rotate

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/apis/rotation/validation"
)

// Transition applies a Rotation to a copy of the stored object at now, or
// refuses it (a Conflict naming the phase).
type Transition func(stored runtime.Object, r *rotation.Rotation, now metav1.Time) (runtime.Object, error)

// Strategy is the update strategy of the subresource: it keeps spec and
// metadata and validates status.
type Strategy interface {
	rest.RESTUpdateStrategy
	rest.ResetFieldsStrategy
}

// REST serves POST of a Rotation to <resource>/NAME/rotate and answers
// with the object as it then stands.
type REST struct {
	store      *genericregistry.Store
	clock      clock.PassiveClock
	transition Transition
}

var (
	_ rest.NamedCreater             = &REST{}
	_ rest.GroupVersionKindProvider = &REST{}
)

// NewREST returns the subresource over a copy of the main store that
// updates with strategy.
func NewREST(store *genericregistry.Store, strategy Strategy, clk clock.PassiveClock, transition Transition) *REST {
	s := *store
	s.UpdateStrategy, s.ResetFieldsStrategy = strategy, strategy
	return &REST{store: &s, clock: clk, transition: transition}
}

// New returns the request kind.
func (r *REST) New() runtime.Object { return &rotation.Rotation{} }

// Destroy does nothing: the main resource owns the store.
func (r *REST) Destroy() {}

// GroupVersionKind says the subresource takes Rotations.
func (r *REST) GroupVersionKind(containingGV schema.GroupVersion) schema.GroupVersionKind {
	return containingGV.WithKind("Rotation")
}

// Create validates the Rotation, runs admission, and applies the
// transition.
func (r *REST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	if options == nil {
		options = &metav1.CreateOptions{}
	}
	rot, ok := obj.(*rotation.Rotation)
	if !ok {
		return nil, apierrors.NewBadRequest("the rotate subresource takes a Rotation")
	}
	if errs := validation.ValidateRotation(rot); len(errs) > 0 {
		return nil, apierrors.NewInvalid(rotation.Kind("Rotation"), name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, rot.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	update := func(_ context.Context, _, stored runtime.Object) (runtime.Object, error) {
		return r.transition(stored, rot, metav1.NewTime(r.clock.Now()))
	}
	updated, _, err := r.store.Update(ctx, name, rest.DefaultUpdatedObjectInfo(nil, update), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc,
		false, &metav1.UpdateOptions{DryRun: options.DryRun, FieldManager: options.FieldManager})
	return updated, err
}
