package carotation

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	clocktesting "k8s.io/utils/clock/testing"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/jwtkey"
)

type getter map[string]*rotation.CertificateAuthority

func (g getter) Get(_ context.Context, name string) (*rotation.CertificateAuthority, error) {
	if ca, ok := g[name]; ok {
		return ca, nil
	}
	return nil, apierrors.NewNotFound(rotation.Resource("certificateauthorities"), name)
}

func attrs(r *rotation.Rotation, name, subresource string) admission.Attributes {
	return admission.NewAttributesRecord(r, nil, rotation.Kind("Rotation").WithVersion("v1alpha1"), "", name,
		rotation.Resource("certificateauthorities").WithVersion("v1alpha1"), subresource, admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "op"})
}

// TestEveryPhaseAndAction: every (phase, action) pair, and force.
func TestEveryPhaseAndAction(t *testing.T) {
	phases := []rotation.RotationPhase{rotation.PhaseNone, rotation.PhasePreparing, rotation.PhasePrepared, rotation.PhaseCompleting, rotation.PhaseCompleted}
	allowed := map[rotation.RotationAction]map[rotation.RotationPhase]bool{
		rotation.RotationStart:    {rotation.PhaseNone: true, rotation.PhaseCompleted: true},
		rotation.RotationComplete: {rotation.PhasePrepared: true},
	}
	for _, action := range []rotation.RotationAction{rotation.RotationStart, rotation.RotationComplete} {
		for _, phase := range phases {
			for _, pending := range []int32{0, 2} {
				for _, force := range []bool{false, true} {
					if force && action == rotation.RotationStart {
						continue // refused as invalid, below
					}
					ca := &rotation.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "ca"},
						Spec:   rotation.CertificateAuthoritySpec{KeyStore: rotation.KeyStore{Type: rotation.KeyStoreEtcd}},
						Status: rotation.CertificateAuthorityStatus{Phase: phase, PendingRenewal: pending}}
					p := New()
					p.SetCertificateAuthorities(getter{"ca": ca})
					err := p.Validate(context.Background(), attrs(&rotation.Rotation{Action: action, Force: force}, "ca", "rotate"), nil)
					want := allowed[action][phase] && (action == rotation.RotationStart || pending == 0 || force)
					if want && err != nil {
						t.Errorf("%s (force %v) in %q with %d pending refused: %v", action, force, phase, pending, err)
					}
					if !want && !apierrors.IsConflict(err) {
						t.Errorf("%s (force %v) in %q with %d pending: %v, want 409 Conflict", action, force, phase, pending, err)
					}
					if !want && !allowed[action][phase] && phase != "" && !strings.Contains(err.Error(), "phase is "+string(phase)) {
						t.Errorf("message %q does not name phase %s", err, phase)
					}
				}
			}
		}
	}
}

func TestInvalidAndMissing(t *testing.T) {
	p := New()
	p.SetCertificateAuthorities(getter{})
	p.SetRotatingCredentials(credGetter{})
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(context.Background(), attrs(&rotation.Rotation{Action: "Restart"}, "ca", "rotate"), nil); !apierrors.IsInvalid(err) {
		t.Errorf("unknown action: %v", err)
	}
	if err := p.Validate(context.Background(), attrs(&rotation.Rotation{Action: rotation.RotationStart, Force: true}, "ca", "rotate"), nil); !apierrors.IsInvalid(err) {
		t.Errorf("forced Start: %v", err)
	}
	if err := p.Validate(context.Background(), attrs(&rotation.Rotation{Action: rotation.RotationStart}, "nope", "rotate"), nil); !apierrors.IsNotFound(err) {
		t.Errorf("missing CA: %v", err)
	}
	if err := p.Validate(context.Background(), attrs(&rotation.Rotation{Action: "Restart"}, "ca", "status"), nil); err != nil {
		t.Errorf("another subresource: %v", err)
	}
	if err := New().ValidateInitialization(); err == nil {
		t.Error("initialized without a getter")
	}
}

type credGetter map[string]*rotation.RotatingCredential

func (g credGetter) Get(_ context.Context, namespace, name string) (*rotation.RotatingCredential, error) {
	if rc, ok := g[namespace+"/"+name]; ok {
		return rc, nil
	}
	return nil, apierrors.NewNotFound(rotation.Resource("rotatingcredentials"), name)
}

// TestRotatingCredentialPhases: Start except while a grace period runs,
// Complete only then, never with force; the refusal names the phase.
func TestRotatingCredentialPhases(t *testing.T) {
	allowed := map[rotation.RotationAction]map[rotation.CredentialPhase]bool{
		rotation.RotationStart:    {rotation.CredentialPhaseNone: true, rotation.CredentialCompleted: true},
		rotation.RotationComplete: {rotation.CredentialRotating: true},
	}
	for _, action := range []rotation.RotationAction{rotation.RotationStart, rotation.RotationComplete} {
		for _, phase := range []rotation.CredentialPhase{rotation.CredentialPhaseNone, rotation.CredentialRotating, rotation.CredentialCompleted} {
			p := New()
			p.SetRotatingCredentials(credGetter{"team/db": {ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "team"}, Status: rotation.RotatingCredentialStatus{Phase: phase}}})
			a := admission.NewAttributesRecord(&rotation.Rotation{Action: action}, nil, rotation.Kind("Rotation").WithVersion("v1alpha1"), "team", "db",
				rotation.Resource("rotatingcredentials").WithVersion("v1alpha1"), "rotate", admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "op"})
			err := p.Validate(context.Background(), a, nil)
			if allowed[action][phase] && err != nil {
				t.Errorf("%s in %q refused: %v", action, phase, err)
			}
			if !allowed[action][phase] && (!apierrors.IsConflict(err) || (phase != "" && !strings.Contains(err.Error(), "phase is "+string(phase)))) {
				t.Errorf("%s in %q: %v, want 409 naming the phase", action, phase, err)
			}
		}
	}
	p := New()
	p.SetRotatingCredentials(credGetter{})
	a := admission.NewAttributesRecord(&rotation.Rotation{Action: rotation.RotationStart}, nil, rotation.Kind("Rotation").WithVersion("v1alpha1"), "team", "nope",
		rotation.Resource("rotatingcredentials").WithVersion("v1alpha1"), "rotate", admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "op"})
	if err := p.Validate(context.Background(), a, nil); !apierrors.IsNotFound(err) {
		t.Errorf("missing RotatingCredential: %v", err)
	}
}

// TestServiceAccountTokensCompleteWaitsForTokens: the plugin judges a
// ServiceAccountTokens CA's Complete at its clock's time: a 409 naming the
// previous key's kid while its tokens may be valid, allowed after.
func TestServiceAccountTokensCompleteWaitsForTokens(t *testing.T) {
	expire := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	ca := &rotation.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "sa"},
		Spec: rotation.CertificateAuthoritySpec{KeyStore: rotation.KeyStore{Type: rotation.KeyStoreEtcd}, Purpose: rotation.PurposeServiceAccountTokens,
			ServiceAccountTokens: &rotation.ServiceAccountTokenKeys{MaxTokenExpiration: &metav1.Duration{Duration: time.Hour}}},
		Status: rotation.CertificateAuthorityStatus{Phase: rotation.PhasePrepared,
			Previous: &rotation.CACertificate{TokenKeyID: "old", TokensExpireTime: &metav1.Time{Time: expire}}}}
	clk := clocktesting.NewFakePassiveClock(expire.Add(-time.Second))
	p := New()
	p.clock = clk
	p.SetCertificateAuthorities(getter{"sa": ca})
	complete := attrs(&rotation.Rotation{Action: rotation.RotationComplete}, "sa", "rotate")
	if err := p.Validate(context.Background(), complete, nil); !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "(kid old) may be valid until 2026-11-25T12:00:00Z") ||
		!strings.Contains(err.Error(), "plus "+jwtkey.TokenExpiryLeeway.String()+" leeway") {
		t.Fatalf("Complete before the tokens expired: %v, want a 409 naming kid, time and the leeway %s", err, jwtkey.TokenExpiryLeeway)
	}
	if err := p.Validate(context.Background(), attrs(&rotation.Rotation{Action: rotation.RotationComplete, Force: true}, "sa", "rotate"), nil); err != nil {
		t.Fatalf("forced: %v", err)
	}
	clk.SetTime(expire)
	if err := p.Validate(context.Background(), complete, nil); err != nil {
		t.Fatalf("Complete once they expired: %v", err)
	}
}
