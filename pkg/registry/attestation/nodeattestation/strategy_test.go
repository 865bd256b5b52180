package nodeattestation

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"rekey.io/rekey/pkg/apis/attestation"
	"rekey.io/rekey/pkg/serveridentity"
)

func challenged() *attestation.NodeAttestation {
	return &attestation.NodeAttestation{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Generation: 1, ResourceVersion: "7"},
		Spec:       attestation.NodeAttestationSpec{PolicyName: "p", EKPublic: []byte{1}, AKPublic: []byte{2}},
		Status: attestation.NodeAttestationStatus{Phase: attestation.NodeAttestationChallenged, EKFingerprint: strings.Repeat("ab", 32),
			Challenge: &attestation.AttestationChallenge{CredentialBlob: []byte{3}, EncryptedSecret: []byte{4}}},
	}
}

// A client's create or update never sets status; a new AK (or EK, or
// policy) drops the challenge made for the old one.
func TestMainResourceKeepsStatusAndDropsStaleChallenges(t *testing.T) {
	s := NewStrategy(runtime.NewScheme())
	n := challenged()
	s.PrepareForCreate(context.Background(), n)
	if n.Status.Phase != "" || n.Status.Challenge != nil || n.Generation != 1 {
		t.Fatalf("create kept status: %+v", n.Status)
	}

	old := challenged()
	same := old.DeepCopy()
	same.Status = attestation.NodeAttestationStatus{Phase: attestation.NodeAttestationAttested, BoundNode: "n1"}
	s.PrepareForUpdate(context.Background(), same, old)
	if same.Status.Phase != attestation.NodeAttestationChallenged || same.Status.BoundNode != "" || same.Generation != 1 {
		t.Fatalf("an update set status or moved generation: %+v gen %d", same.Status, same.Generation)
	}

	newAK := old.DeepCopy()
	newAK.Spec.AKPublic = []byte{9}
	s.PrepareForUpdate(context.Background(), newAK, old)
	if newAK.Status.Challenge != nil || newAK.Status.Phase != "" || newAK.Generation != 2 || newAK.Status.EKFingerprint != old.Status.EKFingerprint {
		t.Fatalf("a new AK kept the old challenge: %+v gen %d", newAK.Status, newAK.Generation)
	}
}

// /status is rekey's own identity's alone, and keeps spec.
func TestStatusIsTheServers(t *testing.T) {
	s := statusStrategy{serverStatusStrategy{NewStrategy(runtime.NewScheme())}}
	old := challenged()
	updated := old.DeepCopy()
	updated.Spec.PolicyName = "other"
	updated.Status.Phase = attestation.NodeAttestationAttested
	s.PrepareForUpdate(context.Background(), updated, old)
	if updated.Spec.PolicyName != "p" {
		t.Fatal("spec changed through /status")
	}
	if errs := s.ValidateUpdate(context.Background(), updated, old); len(errs) != 1 || errs[0].Field != "status" {
		t.Fatalf("a client's status write: %v", errs)
	}
	id, err := serveridentity.New()
	if err != nil {
		t.Fatal(err)
	}
	if errs := s.ValidateUpdate(id.WithUser(context.Background()), updated, old); len(errs) != 0 {
		t.Fatalf("the server's valid status write: %v", errs)
	}
	updated.Status.Phase = "Done"
	if errs := s.ValidateUpdate(id.WithUser(context.Background()), updated, old); len(errs) != 1 || errs[0].Field != "status.phase" {
		t.Fatalf("an unknown phase: %v", errs)
	}
}
