package rotatingcredential

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/apis/rotation/validation"
	"rekey.io/rekey/pkg/registry"
	"rekey.io/rekey/pkg/registry/printers"
	"rekey.io/rekey/pkg/registry/rotation/rotate"
)

// table prints what `kubectl get rcred` shows.
var table = printers.Table[*rotation.RotatingCredential]{
	Columns: []metav1.TableColumnDefinition{
		{Name: "Secret", Type: "string", Description: "The Secret that holds the credential."},
		{Name: "Minter", Type: "string", Description: "How the credential is made."},
		{Name: "Phase", Type: "string", Description: "Rotating while the previous credential's grace period runs."},
		{Name: "Generation", Type: "integer", Description: "Which mint is current."},
		{Name: "Next", Type: "string", Description: "When the next rotation is due."},
		{Name: "Ready", Type: "string", Description: "Whether a current credential is in the Secret."},
		{Name: "Age", Type: "string", Description: "Time since creation."},
	},
	Row: func(c *rotation.RotatingCredential) []interface{} {
		phase, next := string(c.Status.Phase), "<none>"
		if phase == "" {
			phase = "<none>"
		}
		if t := c.Status.NextRotationTime; t != nil {
			next = t.UTC().Format(time.RFC3339)
		}
		return []interface{}{c.Spec.SecretRef.Name, string(c.Spec.Minter.Type), phase, c.Status.CredentialGeneration, next,
			printers.ConditionStatus(c.Status.Conditions, "Ready"), printers.Age(c.CreationTimestamp)}
	},
}

// Storage holds the main resource and its subresources.
type Storage struct {
	RotatingCredential *registry.REST
	Status             *registry.SubresourceREST
	Rotate             *rotate.REST
}

// NewStorage returns the main, /status and /rotate storage.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, clk clock.PassiveClock) (*Storage, error) {
	s := NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &rotation.RotatingCredential{} },
		NewListFunc:               func() runtime.Object { return &rotation.RotatingCredentialList{} },
		DefaultQualifiedResource:  rotation.Resource("rotatingcredentials"),
		SingularQualifiedResource: rotation.Resource("rotatingcredential"),
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		ResetFieldsStrategy:       s,
		TableConvertor:            table,
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter}); err != nil {
		return nil, err
	}
	return &Storage{
		RotatingCredential: registry.NewREST(store, "rcred"),
		Status:             registry.NewSubresourceREST(store, statusStrategy{s}),
		Rotate:             rotate.NewREST(store, rotateStrategy{s}, clk, transition),
	}, nil
}

// transition records a /rotate request for the controller: Start asks for
// a mint now, Complete for the end of the grace period now (the previous
// credential is revoked at once). The phase admission plugin has checked
// the phase by then; the transition checks it again inside the storage's
// compare-and-swap.
func transition(stored runtime.Object, rot *rotation.Rotation, now metav1.Time) (runtime.Object, error) {
	rc := stored.(*rotation.RotatingCredential).DeepCopy()
	if err := validation.CheckCredentialTransition(rc, rot); err != nil {
		return nil, apierrors.NewConflict(rotation.Resource("rotatingcredentials"), rc.Name, err)
	}
	// The request names the generation it is about, from the stored
	// status: Start asks to replace it, Complete to end its grace period.
	// The controller serves a request by generation, never by comparing
	// times (status keeps them to the second, and a mint takes less).
	if rot.Action == rotation.RotationStart {
		rc.Status.RotationRequestedTime = &now
		rc.Status.RotationRequestedGeneration = rc.Status.CredentialGeneration
	} else {
		rc.Status.CompletionRequestedTime = &now
		rc.Status.CompletionRequestedGeneration = rc.Status.CredentialGeneration
	}
	return rc, nil
}

// rotateStrategy lets /rotate record its request; spec and metadata stay.
type rotateStrategy struct{ strategy }

func (rotateStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

func (rotateStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	rc, prev := obj.(*rotation.RotatingCredential), old.(*rotation.RotatingCredential)
	rc.Spec = prev.Spec
	registry.KeepMetadata(rc, prev)
}

func (rotateStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateRotatingCredentialStatusUpdate(obj.(*rotation.RotatingCredential), old.(*rotation.RotatingCredential))
}
