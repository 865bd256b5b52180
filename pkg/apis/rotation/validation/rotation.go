package validation

import (
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/jwtkey"
)

// ValidateRotation checks a Rotation request on its own: a known action,
// no force with Start, and force with Prepare (a Preparing CA becomes
// Prepared by itself once trusted: the action exists only to override).
func ValidateRotation(r *rotation.Rotation) field.ErrorList {
	var allErrs field.ErrorList
	switch r.Action {
	case rotation.RotationStart:
		if r.Force {
			allErrs = append(allErrs, field.Invalid(field.NewPath("force"), true, "only Prepare and Complete can be forced"))
		}
	case rotation.RotationPrepare:
		if !r.Force {
			allErrs = append(allErrs, field.Required(field.NewPath("force"),
				"Prepare only overrides the wait for trust (a Preparing CA becomes Prepared by itself once every consumer trusts the new CA); set force to end the wait anyway"))
		}
	case rotation.RotationComplete:
	default:
		allErrs = append(allErrs, field.NotSupported(field.NewPath("action"), r.Action,
			[]string{string(rotation.RotationStart), string(rotation.RotationPrepare), string(rotation.RotationComplete)}))
	}
	return allErrs
}

// allowedIn says in which phases each action may run.
var allowedIn = map[rotation.RotationAction][]rotation.RotationPhase{
	rotation.RotationStart:    {rotation.PhaseNone, rotation.PhaseCompleted},
	rotation.RotationPrepare:  {rotation.PhasePreparing},
	rotation.RotationComplete: {rotation.PhasePrepared},
}

// CheckTransition says whether a CertificateAuthority may take the
// rotation's action at now. The error names the current phase and where
// the action is allowed, e.g. "cannot Complete: phase is Preparing;
// Complete is allowed only in Prepared". A ServiceAccountTokens CA's
// Complete, unless forced, also waits until every token the previous key
// signed has expired (status.previous.tokensExpireTime): completing
// removes that key from what kube-apiserver verifies with.
func CheckTransition(ca *rotation.CertificateAuthority, r *rotation.Rotation, now time.Time) error {
	if ca.Spec.KeyStore.Type == rotation.KeyStoreFile {
		return fmt.Errorf("cannot %s: CertificateAuthority %q adopts its CA from files, which rekey does not write; "+
			"replace the files (rekey signs with the new CA at once) or create a CertificateAuthority with an Etcd or PKCS11 key store", r.Action, ca.Name)
	}
	phase := ca.Status.Phase
	allowed := allowedIn[r.Action]
	ok := false
	for _, p := range allowed {
		ok = ok || p == phase
	}
	if !ok {
		return fmt.Errorf("cannot %s: phase is %s; %s is allowed only in %s", r.Action, phaseName(phase), r.Action, phaseList(allowed))
	}
	if r.Action == rotation.RotationComplete && !r.Force && ca.Spec.Purpose == rotation.PurposeServiceAccountTokens {
		if err := previousTokensExpired(ca, now); err != nil {
			return err
		}
	}
	if r.Action == rotation.RotationComplete && !r.Force && ca.Status.PendingRenewal > 0 {
		return fmt.Errorf("cannot Complete: %d certificate(s) signed by the previous CA are still valid and were not renewed "+
			"(kubectl rekey status %s lists them); they would stop verifying. Wait for them to renew, or complete with force", ca.Status.PendingRenewal, ca.Name)
	}
	return nil
}

// previousTokensExpired says whether every token a ServiceAccountTokens
// CA's previous key signed has expired at now.
func previousTokensExpired(ca *rotation.CertificateAuthority, now time.Time) error {
	prev := ca.Status.Previous
	if prev == nil || prev.TokensExpireTime == nil {
		return errors.New("cannot Complete: when the tokens signed by the previous key expire is not known yet " +
			"(status.previous.tokensExpireTime is unset until the CertificateAuthority controller reports the rotation Prepared); wait for it, or complete with force")
	}
	if !now.Before(prev.TokensExpireTime.Time) {
		return nil
	}
	kid := prev.TokenKeyID
	if kid == "" {
		kid = "unknown"
	}
	maxExp := "spec.serviceAccountTokens.maxTokenExpiration"
	if t := ca.Spec.ServiceAccountTokens; t != nil && t.MaxTokenExpiration != nil {
		maxExp += " (" + t.MaxTokenExpiration.Duration.String() + ")"
	}
	// The leeway printed is the one the CA controller adds to
	// tokensExpireTime (jwtkey.TokenExpiryLeeway), from the same constant.
	return fmt.Errorf("cannot Complete: tokens signed by the previous key (kid %s) may be valid until %s (%s after the new key began to sign, plus %s leeway for clocks and replicas); "+
		"completing now makes kube-apiserver refuse them. Wait until then, or complete with force",
		kid, prev.TokensExpireTime.UTC().Format(time.RFC3339), maxExp, jwtkey.TokenExpiryLeeway)
}

func phaseName(p rotation.RotationPhase) string {
	if p == rotation.PhaseNone {
		return `"" (never rotated)`
	}
	return string(p)
}

func phaseList(phases []rotation.RotationPhase) string {
	out := ""
	for i, p := range phases {
		if i > 0 {
			out += " or "
		}
		out += phaseName(p)
	}
	return out
}

// credentialAllowedIn says in which phases each action may run on a
// RotatingCredential.
var credentialAllowedIn = map[rotation.RotationAction][]rotation.CredentialPhase{
	rotation.RotationStart:    {rotation.CredentialPhaseNone, rotation.CredentialCompleted},
	rotation.RotationComplete: {rotation.CredentialRotating},
}

// CheckCredentialTransition says whether a RotatingCredential may take
// the rotation's action now: Start mints now, except while a grace period
// runs; Complete ends the grace period now. The error names the phase.
func CheckCredentialTransition(rc *rotation.RotatingCredential, r *rotation.Rotation) error {
	if r.Action == rotation.RotationPrepare {
		return errors.New("cannot Prepare: a RotatingCredential has no trust to wait for; Prepare is for CertificateAuthorities")
	}
	if r.Force {
		return fmt.Errorf("cannot %s with force: force is for CertificateAuthorities", r.Action)
	}
	phase := rc.Status.Phase
	for _, p := range credentialAllowedIn[r.Action] {
		if p == phase {
			return nil
		}
	}
	name := string(phase)
	if phase == rotation.CredentialPhaseNone {
		name = `"" (never rotated)`
	}
	if r.Action == rotation.RotationStart {
		return fmt.Errorf("cannot Start: phase is %s; the previous credential's grace period runs until %s. Complete it first (revoking the previous credential now), or wait", name, timeOrUnknown(rc.Status.GraceEndsTime))
	}
	return fmt.Errorf("cannot Complete: phase is %s; Complete is allowed only in Rotating (while a grace period runs)", name)
}

func timeOrUnknown(t *metav1.Time) string {
	if t == nil {
		return "an unknown time"
	}
	return t.UTC().Format(time.RFC3339)
}
