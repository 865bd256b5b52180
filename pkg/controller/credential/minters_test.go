package credential

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
)

// A Random minter's key is held to the rule a webhook's keys are: never
// one ending in ".old", which rekey keeps for the previous credential.
// Validation refuses it; a RotatingCredential stored before that rule is
// refused at mint time too.
func TestRandomKeyEndingInOldRefused(t *testing.T) {
	t.Parallel()
	rc := &rotationv1alpha1.RotatingCredential{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "db"},
		Spec: rotationv1alpha1.RotatingCredentialSpec{Minter: rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterRandom,
			Random: &rotationv1alpha1.RandomMinter{Key: "password" + OldSuffix, Length: 16}}}}
	_, err := RandomMinter{}.Mint(context.Background(), rc, 1)
	var me *MintError
	if !errors.As(err, &me) || me.Reason != "InvalidSpec" {
		t.Fatalf("want InvalidSpec, got %v", err)
	}
	rc.Spec.Minter.Random.Key = "password"
	data, err := RandomMinter{}.Mint(context.Background(), rc, 1)
	if err != nil || len(data["password"]) == 0 {
		t.Fatalf("a plain key: %v %v", data, err)
	}
}
