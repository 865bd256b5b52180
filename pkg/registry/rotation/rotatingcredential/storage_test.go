package rotatingcredential

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"rekey.io/rekey/pkg/apis/rotation"
)

func credentialIn(phase rotation.CredentialPhase) *rotation.RotatingCredential {
	return &rotation.RotatingCredential{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "team"}, Status: rotation.RotatingCredentialStatus{Phase: phase}}
}

func TestTransition(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	got, err := transition(credentialIn(rotation.CredentialCompleted), &rotation.Rotation{Action: rotation.RotationStart}, now)
	if err != nil || got.(*rotation.RotatingCredential).Status.RotationRequestedTime == nil {
		t.Fatalf("Start when Completed: %v", err)
	}
	got, err = transition(credentialIn(rotation.CredentialRotating), &rotation.Rotation{Action: rotation.RotationComplete}, now)
	if err != nil || got.(*rotation.RotatingCredential).Status.CompletionRequestedTime == nil {
		t.Fatalf("Complete when Rotating: %v", err)
	}
	// Each request names the generation it is about (the stored one), so
	// that the controller serves it once whatever the clock says.
	rc := credentialIn(rotation.CredentialCompleted)
	rc.Status.CredentialGeneration = 4
	got, err = transition(rc, &rotation.Rotation{Action: rotation.RotationStart}, now)
	if err != nil || got.(*rotation.RotatingCredential).Status.RotationRequestedGeneration != 4 {
		t.Fatalf("Start of generation 4: %v, %+v", err, got)
	}
	rc = credentialIn(rotation.CredentialRotating)
	rc.Status.CredentialGeneration = 5
	got, err = transition(rc, &rotation.Rotation{Action: rotation.RotationComplete}, now)
	if err != nil || got.(*rotation.RotatingCredential).Status.CompletionRequestedGeneration != 5 {
		t.Fatalf("Complete of generation 5: %v, %+v", err, got)
	}
	if _, err := transition(credentialIn(rotation.CredentialRotating), &rotation.Rotation{Action: rotation.RotationStart}, now); !apierrors.IsConflict(err) {
		t.Fatalf("Start during a grace period: %v, want 409", err)
	}
	if _, err := transition(credentialIn(""), &rotation.Rotation{Action: rotation.RotationComplete}, now); !apierrors.IsConflict(err) {
		t.Fatalf("Complete outside a grace period: %v, want 409", err)
	}
}

// A client never writes status: create clears it, an update keeps it, and
// /status is rekey's controllers' alone.
func TestStatusIsTheControllers(t *testing.T) {
	s := NewStrategy(runtime.NewScheme())
	rc := credentialIn(rotation.CredentialRotating)
	rc.Status.CredentialGeneration = 7
	s.PrepareForCreate(context.Background(), rc)
	if rc.Status.Phase != "" || rc.Status.CredentialGeneration != 0 || rc.Generation != 1 {
		t.Fatalf("create kept status %+v", rc.Status)
	}
	old := credentialIn(rotation.CredentialCompleted)
	old.ResourceVersion = "1"
	updated := old.DeepCopy()
	updated.Status.Phase = rotation.CredentialRotating
	s.PrepareForUpdate(context.Background(), updated, old)
	if updated.Status.Phase != rotation.CredentialCompleted {
		t.Fatal("an update of the main resource changed status")
	}
	if errs := (statusStrategy{s}).ValidateUpdate(context.Background(), updated, old); len(errs) == 0 {
		t.Fatal("a /status write without rekey's identity was accepted")
	}
}

// Only /rotate records a request: a status write from a stale copy keeps
// the stored ones.
func TestStatusWritesKeepRotateRequests(t *testing.T) {
	s := NewStrategy(runtime.NewScheme())
	old := credentialIn(rotation.CredentialCompleted)
	old.Status.RotationRequestedGeneration, old.Status.CompletionRequestedGeneration = 3, 2
	updated := credentialIn(rotation.CredentialRotating)
	(statusStrategy{s}).PrepareForUpdate(context.Background(), updated, old)
	if updated.Status.RotationRequestedGeneration != 3 || updated.Status.CompletionRequestedGeneration != 2 || updated.Status.Phase != rotation.CredentialRotating {
		t.Fatalf("status write: %+v", updated.Status)
	}
}
