package validation

import "testing"

// A Random minter's key may not end in ".old" (rekey keeps the previous
// credential under "<key>.old"), as a webhook's keys may not.
func TestRandomKeyEndingInOld(t *testing.T) {
	rc := validCredential()
	rc.Spec.Minter.Random.Key = "token.old"
	if errs := ValidateRotatingCredential(rc); !hasError(errs, "spec.minter.random.key", ".old") {
		t.Fatalf("want an error on spec.minter.random.key naming .old, got %v", errs)
	}
}
