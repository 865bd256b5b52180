package attestationpolicy

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/utils/ptr"

	"rekey.io/rekey/pkg/apis/attestation"
)

func policy() *attestation.AttestationPolicy {
	return &attestation.AttestationPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: "3"},
		Spec: attestation.AttestationPolicySpec{
			AllowedEKPublicKeyHashes: []string{strings.Repeat("ab", 32)},
			PCRPolicy:                attestation.PCRPolicy{Bank: "sha256", Mode: attestation.PCRModeTrustOnFirstUse, Selection: []int32{0, 7}},
			SignerNames:              []string{"rekey.io/kube-apiserver-client-kubelet-tpm"},
			ChallengeLifetime:        &metav1.Duration{Duration: 5 * time.Minute},
			MaxAttemptsPerEKPerHour:  ptr.To[int32](10),
		},
	}
}

// Generation moves with spec only; a policy is validated on create and
// update alike.
func TestStrategy(t *testing.T) {
	s := strategy{ObjectTyper: runtime.NewScheme(), NameGenerator: names.SimpleNameGenerator}
	ctx := context.Background()
	p := policy()
	s.PrepareForCreate(ctx, p)
	if p.Generation != 1 {
		t.Fatalf("generation %d after create", p.Generation)
	}
	if errs := s.Validate(ctx, p); len(errs) != 0 {
		t.Fatalf("a valid policy refused: %v", errs)
	}

	labelled := p.DeepCopy()
	labelled.Labels = map[string]string{"team": "a"}
	s.PrepareForUpdate(ctx, labelled, p)
	if labelled.Generation != 1 {
		t.Fatalf("a metadata change moved generation to %d", labelled.Generation)
	}
	changed := p.DeepCopy()
	changed.Spec.PCRPolicy.Selection = []int32{0, 7, 8}
	s.PrepareForUpdate(ctx, changed, p)
	if changed.Generation != 2 {
		t.Fatalf("a spec change left generation at %d", changed.Generation)
	}
	changed.Spec.PCRPolicy.Selection = []int32{24}
	if errs := s.ValidateUpdate(ctx, changed, p); len(errs) == 0 || errs[0].Field != "spec.pcrPolicy.selection[0]" {
		t.Fatalf("an invalid update: %v", errs)
	}
}

func TestTableRow(t *testing.T) {
	p := policy()
	p.Spec.EKRootCertificates = "<PEM>"
	row := table.Row(p)
	want := []interface{}{"rekey.io/kube-apiserver-client-kubelet-tpm", "0,7", "TrustOnFirstUse", "roots+1 keys"}
	for i, w := range want {
		if row[i] != w {
			t.Fatalf("column %d = %v, want %v (row %v)", i, row[i], w, row)
		}
	}
}
