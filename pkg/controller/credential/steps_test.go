package credential

import (
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func newRC() *rotationv1alpha1.RotatingCredential {
	return &rotationv1alpha1.RotatingCredential{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "team", UID: "uid-1"},
		Spec: rotationv1alpha1.RotatingCredentialSpec{SecretRef: rotationv1alpha1.SecretReference{Name: "db"},
			RotationInterval: &metav1.Duration{Duration: time.Hour}, GracePeriod: &metav1.Duration{Duration: 10 * time.Minute},
			Minter: rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterRandom, Random: &rotationv1alpha1.RandomMinter{Key: "token", Length: 32}}},
	}
}

// managed is a Secret rekey wrote for generation gen minted at mint.
func managed(gen int64, mint time.Time, value string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "team", UID: secretUID, Labels: map[string]string{LabelManagedBy: ManagedBy},
			Annotations: map[string]string{AnnotationOwner: "uid-1", AnnotationGeneration: strconv.FormatInt(gen, 10),
				AnnotationMintTime: mint.Format(time.RFC3339Nano), AnnotationKeys: "token"}},
		Data: map[string][]byte{"token": []byte(value)},
	}
	s.Annotations[AnnotationChecksum] = Checksum(s.Data, []string{"token"})
	return s
}

// secretUID is the UID of the Secret rekey created in these tests.
const secretUID = "secret-uid-1"

// recorded is rc with status showing generation gen minted at mint into
// the Secret rekey created (UID secretUID).
func recorded(rc *rotationv1alpha1.RotatingCredential, gen int64, mint time.Time, phase rotationv1alpha1.CredentialPhase) *rotationv1alpha1.RotatingCredential {
	m := metav1.NewTime(mint)
	rc.Status.CredentialGeneration, rc.Status.MintTime, rc.Status.Phase = gen, &m, phase
	rc.Status.SecretUID = secretUID
	return rc
}

// with applies f to rc and returns it.
func with(rc *rotationv1alpha1.RotatingCredential, f func(*rotationv1alpha1.RotatingCredentialStatus)) *rotationv1alpha1.RotatingCredential {
	f(&rc.Status)
	return rc
}

// completedAt is the Secret after generation gen, minted at mint, had its
// predecessor revoked.
func completedAt(gen int64, mint time.Time) *corev1.Secret {
	return managed(gen, mint, "v"+strconv.FormatInt(gen, 10))
}

// copied is s after CopyOld.
func copied(s *corev1.Secret) *corev1.Secret {
	s = s.DeepCopy()
	s.Data["token.old"] = s.Data["token"]
	s.Annotations[AnnotationOldKeys] = "token"
	s.Annotations[AnnotationRotatingFrom] = s.Annotations[AnnotationGeneration]
	return s
}

// rotated is the Secret after generation gen+1 was minted from copied(gen).
func rotated(gen int64, mint time.Time) *corev1.Secret {
	s := copied(managed(gen, mint.Add(-time.Hour), "v"+strconv.FormatInt(gen, 10)))
	n := managed(gen+1, mint, "v"+strconv.FormatInt(gen+1, 10))
	n.Data["token.old"] = s.Data["token.old"]
	n.Annotations[AnnotationOldKeys] = "token"
	n.Annotations[AnnotationOldGeneration] = strconv.FormatInt(gen, 10)
	return n
}

func TestNextFromEveryState(t *testing.T) {
	for name, tc := range map[string]struct {
		rc     *rotationv1alpha1.RotatingCredential
		secret *corev1.Secret
		now    time.Time
		due    string
		want   Plan
	}{
		"a new RotatingCredential": {rc: newRC(), want: Plan{Step: StepMint, Generation: 1}},
		"the Secret deleted by hand": {rc: recorded(newRC(), 3, t0, rotationv1alpha1.CredentialCompleted), now: t0.Add(time.Minute),
			want: Plan{Step: StepMint, Generation: 4, Old: 3}},
		"a Secret that is not rekey's": {rc: newRC(), secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}}, want: Plan{Step: StepRefuse}},
		// Ownership is what only rekey writes: the Secret's UID recorded in
		// status when rekey created it, never a label or an annotation.
		"a Secret labelled by hand": {rc: newRC(), secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", UID: "made-by-a-user",
			Labels: map[string]string{LabelManagedBy: ManagedBy}}, Data: map[string][]byte{"token": []byte("the user's")}}, want: Plan{Step: StepRefuse}},
		"a Secret carrying every marker of rekey's, made by hand before the first mint": {rc: newRC(), secret: func() *corev1.Secret {
			s := managed(1, t0, "v1")
			s.UID = "made-by-a-user"
			return s
		}(), now: t0, want: Plan{Step: StepRefuse}},
		"rekey's Secret deleted and a copy of it made by hand": {rc: recorded(newRC(), 1, t0, ""), secret: func() *corev1.Secret {
			s := managed(1, t0, "v1")
			s.UID = "made-by-a-user"
			return s
		}(), now: t0.Add(time.Minute), want: Plan{Step: StepRefuse}},
		"created by rekey, the crash before recording it (the claim matches)": {rc: with(newRC(), func(st *rotationv1alpha1.RotatingCredentialStatus) {
			st.SecretClaim = ClaimHash("n0nce")
		}), secret: func() *corev1.Secret {
			s := managed(1, t0, "v1")
			s.Annotations[AnnotationClaim] = "n0nce"
			return s
		}(), now: t0, want: Plan{Step: StepRecord, Generation: 1}},
		"a claim that does not match": {rc: with(newRC(), func(st *rotationv1alpha1.RotatingCredentialStatus) {
			st.SecretClaim = ClaimHash("n0nce")
		}), secret: func() *corev1.Secret {
			s := managed(1, t0, "v1")
			s.Annotations[AnnotationClaim] = "guessed"
			return s
		}(), now: t0, want: Plan{Step: StepRefuse}},
		"a Secret of an earlier rekey version (no UID recorded yet)": {rc: with(recorded(newRC(), 1, t0, ""), func(st *rotationv1alpha1.RotatingCredentialStatus) {
			st.SecretUID = ""
		}), secret: managed(1, t0, "v1"), now: t0.Add(time.Minute), want: Plan{Step: StepRecord, Generation: 1}},
		// /rotate is served by generation, not by time: a mint in the same
		// second as the Start serves it once.
		"a Start served by a mint in the same second, after its grace period": {rc: with(recorded(newRC(), 2, t0, rotationv1alpha1.CredentialCompleted), func(st *rotationv1alpha1.RotatingCredentialStatus) {
			at := metav1.NewTime(t0)
			st.RotationRequestedTime, st.RotationRequestedGeneration = &at, 1
			// The Secret's mint time is kept to the second, as the Start's.
		}), secret: completedAt(2, t0), now: t0.Add(11 * time.Minute), want: Plan{Step: StepWait, At: t0.Add(time.Hour)}},
		"a Start asking to replace the current generation": {rc: with(recorded(newRC(), 2, t0, rotationv1alpha1.CredentialCompleted), func(st *rotationv1alpha1.RotatingCredentialStatus) {
			st.RotationRequestedGeneration = 2
		}), secret: completedAt(2, t0), now: t0.Add(11 * time.Minute), want: Plan{Step: StepCopyOld, Generation: 2}},
		"a Complete a few seconds after a Start ends that grace period only": {rc: with(recorded(newRC(), 3, t0.Add(3*time.Second), rotationv1alpha1.CredentialRotating), func(st *rotationv1alpha1.RotatingCredentialStatus) {
			start, complete := metav1.NewTime(t0), metav1.NewTime(t0.Add(3*time.Second))
			st.RotationRequestedTime, st.RotationRequestedGeneration = &start, 1
			st.CompletionRequestedTime, st.CompletionRequestedGeneration = &complete, 2
		}), secret: rotated(2, t0.Add(3*time.Second)), now: t0.Add(4 * time.Second), want: Plan{Step: StepWait, At: t0.Add(10*time.Minute + 3*time.Second)}},
		"a Complete of the current grace period": {rc: with(recorded(newRC(), 2, t0, rotationv1alpha1.CredentialRotating), func(st *rotationv1alpha1.RotatingCredentialStatus) {
			st.CompletionRequestedGeneration = 2
		}), secret: rotated(1, t0), now: t0.Add(time.Second), want: Plan{Step: StepRevoke, Generation: 2, Old: 1}},
		"another RotatingCredential's Secret": {rc: newRC(), secret: func() *corev1.Secret {
			s := managed(1, t0, "v1")
			s.Annotations[AnnotationOwner] = "uid-2"
			return s
		}(), want: Plan{Step: StepRefuse}},
		"minted, not recorded (a mint time in the Secret newer than in status)": {rc: recorded(newRC(), 1, t0, ""), secret: rotated(1, t0.Add(time.Hour)),
			now: t0.Add(time.Hour), want: Plan{Step: StepRecord, Generation: 2}},
		"recorded through the API (to the second) from a Secret whose mint time has nanoseconds": {rc: recorded(newRC(), 1, t0, ""),
			secret: managed(1, t0.Add(123456789), "v1"), now: t0.Add(time.Minute), want: Plan{Step: StepWait, At: t0.Add(time.Hour + 123456789)}},
		"first mint, not recorded": {rc: with(newRC(), func(st *rotationv1alpha1.RotatingCredentialStatus) { st.SecretClaim = ClaimHash("c") }), secret: func() *corev1.Secret {
			s := managed(1, t0, "v1")
			s.Annotations[AnnotationClaim] = "c"
			return s
		}(), now: t0, want: Plan{Step: StepRecord, Generation: 1}},
		"current, not due": {rc: recorded(newRC(), 1, t0, ""), secret: managed(1, t0, "v1"), now: t0.Add(30 * time.Minute),
			want: Plan{Step: StepWait, At: t0.Add(time.Hour)}},
		"due": {rc: recorded(newRC(), 1, t0, ""), secret: managed(1, t0, "v1"), now: t0.Add(time.Hour), want: Plan{Step: StepCopyOld, Generation: 1}},
		"asked for (/rotate Start)": {rc: func() *rotationv1alpha1.RotatingCredential {
			rc := recorded(newRC(), 1, t0, "")
			at := metav1.NewTime(t0.Add(time.Minute))
			rc.Status.RotationRequestedTime, rc.Status.RotationRequestedGeneration = &at, 1
			return rc
		}(), secret: managed(1, t0, "v1"), now: t0.Add(2 * time.Minute), want: Plan{Step: StepCopyOld, Generation: 1}},
		"a Start asked before the current mint is spent": {rc: func() *rotationv1alpha1.RotatingCredential {
			rc := recorded(newRC(), 2, t0, rotationv1alpha1.CredentialCompleted)
			at := metav1.NewTime(t0.Add(-time.Minute))
			rc.Status.RotationRequestedTime, rc.Status.RotationRequestedGeneration = &at, 1
			return rc
		}(), secret: managed(2, t0, "v2"), now: t0.Add(2 * time.Minute), want: Plan{Step: StepWait, At: t0.Add(time.Hour)}},
		"its CA rotated": {rc: recorded(newRC(), 1, t0, ""), secret: managed(1, t0, "v1"), now: t0.Add(time.Minute), due: "CA",
			want: Plan{Step: StepCopyOld, Generation: 1}},
		"the .old keys equal the current ones (copied, not minted)": {rc: recorded(newRC(), 1, t0, ""), secret: copied(managed(1, t0, "v1")),
			now: t0.Add(time.Hour), want: Plan{Step: StepMint, Generation: 2, Old: 1}},
		"in the grace period": {rc: recorded(newRC(), 2, t0, rotationv1alpha1.CredentialRotating), secret: rotated(1, t0), now: t0.Add(5 * time.Minute),
			want: Plan{Step: StepWait, At: t0.Add(10 * time.Minute)}},
		"grace period over": {rc: recorded(newRC(), 2, t0, rotationv1alpha1.CredentialRotating), secret: rotated(1, t0), now: t0.Add(10 * time.Minute),
			want: Plan{Step: StepRevoke, Generation: 2, Old: 1}},
		"completed early (/rotate Complete)": {rc: func() *rotationv1alpha1.RotatingCredential {
			rc := recorded(newRC(), 2, t0, rotationv1alpha1.CredentialRotating)
			at := metav1.NewTime(t0.Add(time.Minute))
			rc.Status.CompletionRequestedTime, rc.Status.CompletionRequestedGeneration = &at, 2
			return rc
		}(), secret: rotated(1, t0), now: t0.Add(2 * time.Minute), want: Plan{Step: StepRevoke, Generation: 2, Old: 1}},
		"revoked, not recorded": {rc: recorded(newRC(), 2, t0, rotationv1alpha1.CredentialRotating), secret: managed(2, t0, "v2"), now: t0.Add(11 * time.Minute),
			want: Plan{Step: StepRecord, Generation: 2}},
		"edited by hand": {rc: recorded(newRC(), 2, t0, rotationv1alpha1.CredentialCompleted), secret: func() *corev1.Secret {
			s := managed(2, t0, "v2")
			s.Data["token"] = []byte("typed in")
			return s
		}(), now: t0.Add(time.Minute), want: Plan{Step: StepMint, Generation: 3, Old: 2}},
		"edited by hand during a grace period": {rc: recorded(newRC(), 2, t0, rotationv1alpha1.CredentialRotating), secret: func() *corev1.Secret {
			s := rotated(1, t0)
			delete(s.Data, "token")
			return s
		}(), now: t0.Add(time.Minute), want: Plan{Step: StepRevoke, Generation: 2, Old: 1}},
		"an older Secret put back": {rc: recorded(newRC(), 5, t0, rotationv1alpha1.CredentialCompleted), secret: managed(3, t0.Add(-2*time.Hour), "v3"),
			now: t0.Add(time.Minute), want: Plan{Step: StepMint, Generation: 6, Old: 5}},
		// A generation in its grace period is recorded in status too
		// (phase Rotating at generation N: N-1 waits for its revocation):
		// a Secret that no longer shows it must not make rekey forget it.
		"the Secret deleted during a grace period": {rc: recorded(newRC(), 5, t0, rotationv1alpha1.CredentialRotating), now: t0.Add(time.Minute),
			want: Plan{Step: StepRevoke, Generation: 5, Old: 4}},
		"the generation annotation set back by hand during a grace period": {rc: recorded(newRC(), 5, t0, rotationv1alpha1.CredentialRotating), secret: managed(3, t0.Add(-2*time.Hour), "v3"),
			now: t0.Add(time.Minute), want: Plan{Step: StepRevoke, Generation: 5, Old: 4}},
		"rekey's Secret stripped of its annotations during a grace period": {rc: recorded(newRC(), 5, t0, rotationv1alpha1.CredentialRotating), secret: func() *corev1.Secret {
			s := managed(5, t0, "v5")
			s.Annotations = nil
			return s
		}(), now: t0.Add(time.Minute), want: Plan{Step: StepRevoke, Generation: 5, Old: 4}},
	} {
		t.Run(name, func(t *testing.T) {
			got := Next(Observed{RC: tc.rc, Secret: tc.secret, Now: tc.now, DueReason: tc.due})
			// Only a revocation status alone knows of leaves the Secret alone.
			tc.want.FromStatus = tc.want.Step == StepRevoke && (tc.secret == nil || ReadSecret(tc.secret).OldGeneration != tc.want.Old)
			if got.Step != tc.want.Step || got.Generation != tc.want.Generation || got.Old != tc.want.Old || !got.At.Equal(tc.want.At) || got.FromStatus != tc.want.FromStatus {
				t.Fatalf("Next = %+v, want %+v", got, tc.want)
			}
			if got.Reason == "" {
				t.Error("no reason")
			}
		})
	}
}
