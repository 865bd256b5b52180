package nodeattestation

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	"rekey.io/rekey/pkg/apis/attestation"
	"rekey.io/rekey/pkg/apis/attestation/validation"
	"rekey.io/rekey/pkg/apis/message"
	"rekey.io/rekey/pkg/attest"
)

// oneNode is a statusStore of one NodeAttestation; bump, when set, changes
// its generation just before a write (a spec update racing the challenge).
type oneNode struct {
	n      *attestation.NodeAttestation
	bump   bool
	writes int
}

func (s *oneNode) Get(_ context.Context, name string) (*attestation.NodeAttestation, error) {
	if s.n.Name != name {
		return nil, apierrors.NewNotFound(attestation.Resource("nodeattestations"), name)
	}
	return s.n.DeepCopy(), nil
}

func (s *oneNode) Write(_ context.Context, _ string, change func(*attestation.NodeAttestation) error, _ []string) (*attestation.NodeAttestation, error) {
	n := s.n.DeepCopy()
	if s.bump {
		n.Generation++
	}
	if err := change(n); err != nil {
		return nil, err
	}
	s.writes++
	s.n = n
	return n.DeepCopy(), nil
}

type fakeChallenger struct {
	err   error
	calls int
}

func (c *fakeChallenger) Challenge(context.Context, string, *attestation.NodeAttestationSpec) (*attestation.AttestationChallenge, string, error) {
	c.calls++
	if c.err != nil {
		return nil, "ab", c.err
	}
	return &attestation.AttestationChallenge{CredentialBlob: []byte{1}, EncryptedSecret: []byte{2}, PCRSelection: []int32{0, 7},
		ExpirationTime: metav1.NewTime(time.Date(2026, 11, 22, 12, 5, 0, 0, time.UTC))}, "ab", nil
}

func newChallengeREST(challengerErr error) (*ChallengeREST, *oneNode, *fakeChallenger) {
	store := &oneNode{n: &attestation.NodeAttestation{ObjectMeta: metav1.ObjectMeta{Name: "n1", Generation: 2}}}
	c := &fakeChallenger{err: challengerErr}
	return &ChallengeREST{status: store, challenger: c, clock: clocktesting.NewFakePassiveClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))}, store, c
}

func TestChallengeREST(t *testing.T) {
	ctx := context.Background()
	t.Run("a challenge", func(t *testing.T) {
		r, store, _ := newChallengeREST(nil)
		obj, err := r.Create(ctx, "n1", &attestation.ChallengeRequest{}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := obj.(*attestation.NodeAttestation)
		if n.Status.Phase != attestation.NodeAttestationChallenged || n.Status.Challenge == nil || n.Status.EKFingerprint != "ab" ||
			n.Status.Conditions[0].Reason != "Challenged" || n.Status.Conditions[0].ObservedGeneration != 2 || store.writes != 1 {
			t.Fatalf("status %+v", n.Status)
		}
	})
	t.Run("a refusal is recorded and answered 403", func(t *testing.T) {
		r, store, _ := newChallengeREST(&attest.Refusal{Reason: "EKNotTrusted", Message: "unknown authority"})
		_, err := r.Create(ctx, "n1", &attestation.ChallengeRequest{}, nil, nil)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "EKNotTrusted: unknown authority") {
			t.Fatalf("err %v", err)
		}
		if st := store.n.Status; st.Phase != attestation.NodeAttestationRefused || st.Challenge != nil || st.Conditions[0].Reason != "EKNotTrusted" {
			t.Fatalf("status %+v", st)
		}
	})
	t.Run("an error is not a refusal", func(t *testing.T) {
		r, store, _ := newChallengeREST(errors.New("etcd unavailable"))
		if _, err := r.Create(ctx, "n1", &attestation.ChallengeRequest{}, nil, nil); !apierrors.IsInternalError(err) || store.writes != 0 {
			t.Fatalf("err %v, %d writes", err, store.writes)
		}
	})
	t.Run("the spec changed meanwhile", func(t *testing.T) {
		r, store, _ := newChallengeREST(nil)
		store.bump = true
		if _, err := r.Create(ctx, "n1", &attestation.ChallengeRequest{}, nil, nil); !apierrors.IsConflict(err) || store.writes != 0 {
			t.Fatalf("err %v, %d writes", err, store.writes)
		}
	})
	t.Run("a dry run makes no challenge", func(t *testing.T) {
		r, store, c := newChallengeREST(nil)
		if _, err := r.Create(ctx, "n1", &attestation.ChallengeRequest{}, nil, &metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil || c.calls != 0 || store.writes != 0 {
			t.Fatalf("err %v, %d challenges, %d writes", err, c.calls, store.writes)
		}
	})
	t.Run("no such node", func(t *testing.T) {
		r, _, c := newChallengeREST(nil)
		if _, err := r.Create(ctx, "n2", &attestation.ChallengeRequest{}, nil, nil); !apierrors.IsNotFound(err) || c.calls != 0 {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("admission refuses", func(t *testing.T) {
		r, _, c := newChallengeREST(nil)
		deny := func(context.Context, runtime.Object) error {
			return apierrors.NewForbidden(attestation.Resource("nodeattestations"), "n1", errors.New("no"))
		}
		if _, err := r.Create(ctx, "n1", &attestation.ChallengeRequest{}, deny, nil); !apierrors.IsForbidden(err) || c.calls != 0 {
			t.Fatalf("err %v", err)
		}
	})
}

// TestSetReadyCapsTheMessage: the Ready condition's message is valid UTF-8
// within metav1's limit however long the refusal it quotes, and is not cut
// inside a character (JSON would turn the broken bytes into longer U+FFFD
// and the next write of the status would be refused).
func TestSetReadyCapsTheMessage(t *testing.T) {
	n := &attestation.NodeAttestation{ObjectMeta: metav1.ObjectMeta{Name: "n1", Generation: 1, ResourceVersion: "1"}}
	SetReady(n, metav1.ConditionFalse, "WrongSubject", "a"+strings.Repeat("é", 20000), time.Now())
	got := n.Status.Conditions[0].Message
	if len(got) > message.MaxLength || !utf8.ValidString(got) {
		t.Fatalf("message of %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
	}
	if errs := validation.ValidateNodeAttestationStatusUpdate(n, n); len(errs) > 0 {
		t.Fatalf("status fails validation: %v", errs)
	}
}
