package credential

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
)

// What rekey keeps on a Secret it manages. The credential's own values are
// only in data; the annotations say which generation they are, when it was
// minted, which keys it is made of, and where a rotation stands, so that
// every step can be taken again after a crash from the Secret alone.
const (
	LabelManagedBy = "rekey.io/managed-by"
	ManagedBy      = "rekey"

	AnnotationOwner         = "rotation.rekey.io/rotating-credential-uid"
	AnnotationGeneration    = "rotation.rekey.io/generation"
	AnnotationMintTime      = "rotation.rekey.io/mint-time"
	AnnotationKeys          = "rotation.rekey.io/keys"
	AnnotationChecksum      = "rotation.rekey.io/checksum"
	AnnotationRotatingFrom  = "rotation.rekey.io/rotating-from"
	AnnotationOldGeneration = "rotation.rekey.io/old-generation"
	AnnotationOldKeys       = "rotation.rekey.io/old-keys"
	// AnnotationClaim is the random value whose SHA-256 rekey recorded in
	// status (secretClaim) before it created the Secret.
	AnnotationClaim = "rotation.rekey.io/claim"

	// OldSuffix marks the previous credential's keys during a grace period.
	OldSuffix = ".old"
)

// StepKind is the one thing a reconcile does.
type StepKind string

// Steps, in the order a rotation takes them.
const (
	// StepMint mints Generation into the Secret (creating it if missing),
	// recording Old as the generation to revoke after the grace period.
	StepMint StepKind = "Mint"
	// StepRecord copies the Secret's generation and mint time to status.
	StepRecord StepKind = "Record"
	// StepCopyOld copies the current keys to "<key>.old": the first step
	// of a rotation.
	StepCopyOld StepKind = "CopyOld"
	// StepRevoke revokes generation Old and removes the ".old" keys.
	StepRevoke StepKind = "Revoke"
	// StepWait does nothing until At.
	StepWait StepKind = "Wait"
	// StepRefuse leaves a Secret rekey does not manage alone.
	StepRefuse StepKind = "Refuse"
)

// Plan is the next step.
type Plan struct {
	Step       StepKind
	Generation int64
	Old        int64
	At         time.Time
	Reason     string
	// FromStatus says that only status knows of generation Old (the Secret
	// is missing or no longer shows it): its revocation is recorded in
	// status, and the Secret is left alone.
	FromStatus bool
}

// SecretState is what the annotations of a managed Secret say.
type SecretState struct {
	Generation, OldGeneration, RotatingFrom int64
	MintTime                                time.Time
	Keys, OldKeys                           []string
	Checksum                                string
}

// ReadSecret reads a Secret's annotations.
func ReadSecret(s *corev1.Secret) SecretState {
	a := s.Annotations
	num := func(k string) int64 {
		n, err := strconv.ParseInt(a[k], 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		return n
	}
	st := SecretState{Generation: num(AnnotationGeneration), OldGeneration: num(AnnotationOldGeneration), RotatingFrom: num(AnnotationRotatingFrom),
		Keys: splitKeys(a[AnnotationKeys]), OldKeys: splitKeys(a[AnnotationOldKeys]), Checksum: a[AnnotationChecksum]}
	if t, err := time.Parse(time.RFC3339Nano, a[AnnotationMintTime]); err == nil {
		st.MintTime = t
	}
	return st
}

func splitKeys(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// Checksum is the SHA-256 over the named keys and their values: it tells
// a Secret edited by hand from the one rekey wrote, without keeping
// anything that reveals the values.
func Checksum(data map[string][]byte, keys []string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(slices.Values(keys)) {
		v := data[k]
		h.Write([]byte(strconv.Itoa(len(k)) + ":" + k + strconv.Itoa(len(v)) + ":"))
		h.Write(v)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ClaimHash is what status records of a claim: its hex SHA-256.
func ClaimHash(claim string) string {
	sum := sha256.Sum256([]byte(claim))
	return hex.EncodeToString(sum[:])
}

// Observed is what one reconcile looks at.
type Observed struct {
	RC     *rotationv1alpha1.RotatingCredential
	Secret *corev1.Secret // nil: missing
	Now    time.Time
	// DueReason, when set, makes a rotation due now (a ClientCertificate
	// whose CA is rotating).
	DueReason string
}

// Next decides the next step from the RotatingCredential and its Secret
// alone. Every step is recorded before the next one is decided, so a
// crash between two steps resumes at the second.
func Next(o Observed) Plan {
	rc, st := o.RC, &o.RC.Status
	// A Secret that does not show the credential status recorded (missing,
	// emptied, or set back) is minted again from status; a generation
	// still waiting for its revocation, which that Secret no longer names,
	// is revoked first (now: its Secret is gone, and there is room for one
	// pending generation only), so that no generation is forgotten.
	fromStatus := func(p Plan) Plan {
		if old := pendingInStatus(st); old > 0 {
			return Plan{Step: StepRevoke, Old: old, Generation: st.CredentialGeneration, FromStatus: true,
				Reason: p.Reason + " during the grace period of generation " + strconv.FormatInt(old, 10) + ", which is revoked first"}
		}
		return p
	}
	if o.Secret == nil {
		return fromStatus(Plan{Step: StepMint, Generation: st.CredentialGeneration + 1, Old: st.CredentialGeneration, Reason: "the Secret is missing"})
	}
	s := o.Secret
	if !CreatedByRekey(rc, s) {
		return Plan{Step: StepRefuse, Reason: "Secret " + s.Name + " exists and was not created by rekey for this RotatingCredential (its UID is not the one rekey recorded); rekey never writes into a Secret it did not create: delete it, or name another Secret"}
	}
	sec := ReadSecret(s)
	if sec.Generation == 0 || sec.MintTime.IsZero() {
		return fromStatus(Plan{Step: StepMint, Generation: st.CredentialGeneration + 1, Old: st.CredentialGeneration, Reason: "the Secret holds no credential of this RotatingCredential"})
	}
	if sec.Generation < st.CredentialGeneration {
		// An older Secret put back: the newer credential may be lost; mint
		// again and revoke what status knew as current.
		return fromStatus(Plan{Step: StepMint, Generation: st.CredentialGeneration + 1, Old: st.CredentialGeneration, Reason: "the Secret holds an older generation than status records"})
	}
	if Checksum(s.Data, sec.Keys) != sec.Checksum {
		if sec.OldGeneration > 0 {
			// A previous credential still waits for its revocation: it goes
			// first, so that no generation is forgotten.
			return Plan{Step: StepRevoke, Old: sec.OldGeneration, Generation: sec.Generation, Reason: "the credential's keys were changed by hand during a grace period"}
		}
		// Edited by hand: what is there is not the credential rekey
		// minted, which is revoked after the grace period.
		return Plan{Step: StepMint, Generation: sec.Generation + 1, Old: sec.Generation, Reason: "the credential's keys were changed by hand"}
	}
	// Status keeps times to the second (metav1.Time), so they are
	// compared to the second.
	if p := expectedPhase(sec); sec.Generation != st.CredentialGeneration || st.MintTime == nil || st.MintTime.Unix() != sec.MintTime.Unix() || st.Phase != p || st.SecretUID != s.UID {
		return Plan{Step: StepRecord, Generation: sec.Generation, Reason: "status does not show the Secret's credential yet"}
	}
	interval, grace := rc.Spec.RotationInterval.Duration, rc.Spec.GracePeriod.Duration
	if sec.OldGeneration > 0 {
		graceEnds := sec.MintTime.Add(grace)
		// /rotate Complete names the generation whose grace period it
		// ends (the server stamps it): never a later one, whatever the
		// clock says.
		if st.CompletionRequestedGeneration > 0 && st.CompletionRequestedGeneration == sec.Generation {
			graceEnds = o.Now
		}
		if o.Now.Before(graceEnds) {
			return Plan{Step: StepWait, At: graceEnds, Reason: "the grace period runs"}
		}
		return Plan{Step: StepRevoke, Old: sec.OldGeneration, Generation: sec.Generation, Reason: "the grace period ended"}
	}
	if sec.RotatingFrom == sec.Generation && sec.RotatingFrom > 0 {
		return Plan{Step: StepMint, Generation: sec.Generation + 1, Old: sec.Generation, Reason: "the current keys are kept as .old"}
	}
	due := sec.MintTime.Add(interval)
	switch {
	case !o.Now.Before(due):
		return Plan{Step: StepCopyOld, Generation: sec.Generation, Reason: "the rotation interval passed"}
	// /rotate Start names the generation it asks to replace (the server
	// stamps the current one): any later mint served it, so one Start
	// makes exactly one new generation.
	case st.RotationRequestedGeneration > 0 && st.RotationRequestedGeneration >= sec.Generation:
		return Plan{Step: StepCopyOld, Generation: sec.Generation, Reason: "a rotation was asked for (/rotate Start)"}
	case o.DueReason != "":
		return Plan{Step: StepCopyOld, Generation: sec.Generation, Reason: o.DueReason}
	}
	return Plan{Step: StepWait, At: due, Reason: "the next rotation is due then"}
}

// pendingInStatus is the generation that status records as waiting for
// its revocation: phase Rotating at generation N means that the Secret
// recorded held old-generation N-1 (every mint of N records N-1 as the
// one to revoke), and a revocation is recorded (phase Completed) before
// anything else is minted.
func pendingInStatus(st *rotationv1alpha1.RotatingCredentialStatus) int64 {
	if st.Phase == rotationv1alpha1.CredentialRotating && st.CredentialGeneration > 1 {
		return st.CredentialGeneration - 1
	}
	return 0
}

// CreatedByRekey says whether s is the Secret rekey created for rc, from
// what only rekey writes: the Secret's UID that status recorded when rekey
// created it, or, between the create and that record (a crash), the claim
// whose hash rekey recorded in status before the create. Labels and
// annotations prove nothing: anyone who may write Secrets can set them.
func CreatedByRekey(rc *rotationv1alpha1.RotatingCredential, s *corev1.Secret) bool {
	st := &rc.Status
	switch {
	case st.SecretUID != "":
		return s.UID == st.SecretUID
	case st.SecretClaim != "":
		claim, ok := s.Annotations[AnnotationClaim]
		return ok && subtle.ConstantTimeCompare([]byte(ClaimHash(claim)), []byte(st.SecretClaim)) == 1
	}
	// A RotatingCredential whose status recorded a mint before rekey
	// recorded Secret UIDs (status has neither): its Secret is recognised
	// once by the marks that version wrote, matching status, and its UID
	// is recorded from then on. A new RotatingCredential never takes this
	// path: its first record writes the UID with the generation.
	sec := ReadSecret(s)
	return st.CredentialGeneration > 0 && s.Labels[LabelManagedBy] == ManagedBy && s.Annotations[AnnotationOwner] == string(rc.UID) &&
		sec.Generation == st.CredentialGeneration && st.MintTime != nil && st.MintTime.Unix() == sec.MintTime.Unix()
}

// expectedPhase is the phase status shows for a Secret.
func expectedPhase(sec SecretState) rotationv1alpha1.CredentialPhase {
	switch {
	case sec.OldGeneration > 0:
		return rotationv1alpha1.CredentialRotating
	case sec.Generation > 1:
		return rotationv1alpha1.CredentialCompleted
	}
	return rotationv1alpha1.CredentialPhaseNone
}
