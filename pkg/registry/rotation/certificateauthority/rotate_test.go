package certificateauthority

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/signing/keystorepaths"
)

// Start moves a finished CA to Preparing and clears the last rotation's
// times; Complete out of Prepared is a 409 naming the phase.
func TestTransition(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	ca := newCA()
	ca.Status.Phase, ca.Status.LastCompletionTime = rotation.PhaseCompleted, &now
	got, err := transition(ca, &rotation.Rotation{Action: rotation.RotationStart}, now)
	if err != nil {
		t.Fatal(err)
	}
	if st := got.(*rotation.CertificateAuthority).Status; st.Phase != rotation.PhasePreparing || st.LastInitiationTime == nil || st.LastCompletionTime != nil {
		t.Fatalf("status after Start %+v", st)
	}
	if ca.Status.Phase != rotation.PhaseCompleted {
		t.Fatal("the stored object was changed in place")
	}
	ca.Status.Phase = rotation.PhasePreparing
	if _, err := transition(ca, &rotation.Rotation{Action: rotation.RotationComplete}, now); !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "phase is Preparing") {
		t.Fatalf("Complete while Preparing: %v", err)
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

// A ServiceAccountTokens CA's Complete is decided at the request's time:
// a 409 while tokens of the previous key may be valid, allowed from
// status.previous.tokensExpireTime on, or with force.
func TestTransitionCompleteWaitsForTokens(t *testing.T) {
	expire := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	ca := newCA()
	ca.Spec.Purpose = rotation.PurposeServiceAccountTokens
	ca.Spec.ServiceAccountTokens = &rotation.ServiceAccountTokenKeys{MaxTokenExpiration: &metav1.Duration{Duration: time.Hour}}
	ca.Status.Phase = rotation.PhasePrepared
	ca.Status.Previous = &rotation.CACertificate{TokenKeyID: "kid-1", TokensExpireTime: &metav1.Time{Time: expire}}
	complete := &rotation.Rotation{Action: rotation.RotationComplete}
	if _, err := transition(ca, complete, metav1.NewTime(expire.Add(-time.Minute))); !apierrors.IsConflict(err) ||
		!strings.Contains(err.Error(), "(kid kid-1) may be valid until 2026-11-23T12:00:00Z") {
		t.Fatalf("Complete before the tokens expired: %v", err)
	}
	got, err := transition(ca, complete, metav1.NewTime(expire))
	if err != nil {
		t.Fatalf("Complete once they expired: %v", err)
	}
	if got.(*rotation.CertificateAuthority).Status.Phase != rotation.PhaseCompleting {
		t.Fatalf("phase %s", got.(*rotation.CertificateAuthority).Status.Phase)
	}
	if _, err := transition(ca, &rotation.Rotation{Action: rotation.RotationComplete, Force: true}, metav1.NewTime(expire.Add(-time.Hour))); err != nil {
		t.Fatalf("forced Complete: %v", err)
	}
}
