package validation

import (
	"strings"
	"testing"
	"time"

	"rekey.io/rekey/pkg/apis/rotation"
)

// TestCheckTransition covers every (phase, action) pair, and force.
func TestCheckTransition(t *testing.T) {
	phases := []rotation.RotationPhase{rotation.PhaseNone, rotation.PhasePreparing, rotation.PhasePrepared, rotation.PhaseCompleting, rotation.PhaseCompleted}
	allowed := map[rotation.RotationAction]map[rotation.RotationPhase]bool{
		rotation.RotationStart:    {rotation.PhaseNone: true, rotation.PhaseCompleted: true},
		rotation.RotationPrepare:  {rotation.PhasePreparing: true},
		rotation.RotationComplete: {rotation.PhasePrepared: true},
	}
	for _, action := range []rotation.RotationAction{rotation.RotationStart, rotation.RotationPrepare, rotation.RotationComplete} {
		for _, phase := range phases {
			ca := etcdCA()
			ca.Status.Phase = phase
			// Prepare exists only forced (ValidateRotation).
			err := CheckTransition(ca, &rotation.Rotation{Action: action, Force: action == rotation.RotationPrepare}, time.Now())
			if allowed[action][phase] {
				if err != nil {
					t.Errorf("%s in %q refused: %v", action, phase, err)
				}
				continue
			}
			if err == nil {
				t.Errorf("%s in %q allowed", action, phase)
				continue
			}
			if !strings.Contains(err.Error(), "cannot "+string(action)) || !strings.Contains(err.Error(), "is allowed only in") {
				t.Errorf("%s in %q: message %q does not say what is allowed", action, phase, err)
			}
			if phase != "" && !strings.Contains(err.Error(), "phase is "+string(phase)) {
				t.Errorf("%s in %q: message %q does not name the phase", action, phase, err)
			}
		}
	}
	ca := etcdCA()
	ca.Status.Phase = rotation.PhasePreparing
	if err := CheckTransition(ca, &rotation.Rotation{Action: rotation.RotationComplete}, time.Now()); err == nil || err.Error() != "cannot Complete: phase is Preparing; Complete is allowed only in Prepared" {
		t.Errorf("message %q", err)
	}
}

func TestCompleteWithPendingRenewals(t *testing.T) {
	ca := etcdCA()
	ca.Status.Phase = rotation.PhasePrepared
	ca.Status.PendingRenewal = 3
	err := CheckTransition(ca, &rotation.Rotation{Action: rotation.RotationComplete}, time.Now())
	if err == nil || !strings.Contains(err.Error(), "3 certificate(s)") || !strings.Contains(err.Error(), "force") {
		t.Fatalf("error %v, want one with the count and the way out", err)
	}
	if err := CheckTransition(ca, &rotation.Rotation{Action: rotation.RotationComplete, Force: true}, time.Now()); err != nil {
		t.Fatalf("forced: %v", err)
	}
	ca.Status.PendingRenewal = 0
	if err := CheckTransition(ca, &rotation.Rotation{Action: rotation.RotationComplete}, time.Now()); err != nil {
		t.Fatalf("nothing pending: %v", err)
	}
}

func TestFileCAsAreNotRotated(t *testing.T) {
	ca := etcdCA()
	ca.Spec.KeyStore = rotation.KeyStore{Type: rotation.KeyStoreFile}
	if err := CheckTransition(ca, &rotation.Rotation{Action: rotation.RotationStart}, time.Now()); err == nil || !strings.Contains(err.Error(), "replace the files") {
		t.Fatalf("File CA: %v", err)
	}
}

func TestValidateRotation(t *testing.T) {
	for name, tc := range map[string]struct {
		r         rotation.Rotation
		wantField string
	}{
		"start":          {r: rotation.Rotation{Action: rotation.RotationStart}},
		"complete force": {r: rotation.Rotation{Action: rotation.RotationComplete, Force: true}},
		"unknown":        {r: rotation.Rotation{Action: "Restart"}, wantField: "action"},
		"empty":          {r: rotation.Rotation{}, wantField: "action"},
		"forced start":   {r: rotation.Rotation{Action: rotation.RotationStart, Force: true}, wantField: "force"},
		"forced prepare": {r: rotation.Rotation{Action: rotation.RotationPrepare, Force: true}},
		"prepare":        {r: rotation.Rotation{Action: rotation.RotationPrepare}, wantField: "force"},
	} {
		errs := ValidateRotation(&tc.r)
		if tc.wantField == "" && len(errs) != 0 || tc.wantField != "" && !hasError(errs, tc.wantField, "") {
			t.Errorf("%s: %v", name, errs)
		}
	}
}

// TestPrepareIsNotForCredentials: a RotatingCredential has no trust gate.
func TestPrepareIsNotForCredentials(t *testing.T) {
	err := CheckCredentialTransition(&rotation.RotatingCredential{}, &rotation.Rotation{Action: rotation.RotationPrepare, Force: true})
	if err == nil || !strings.Contains(err.Error(), "Prepare is for CertificateAuthorities") {
		t.Fatalf("Prepare on a RotatingCredential: %v", err)
	}
}
