package validation

import (
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/apis/rotation"
)

// TestCredentialSecretRefImmutableEveryField: every field of a
// RotatingCredential's Secret reference, present and future, is refused
// when changed: the per-field check names the field, the whole-struct
// check catches one not named yet. A field of a kind the test cannot
// change fails it, so that a new field is looked at.
func TestCredentialSecretRefImmutableEveryField(t *testing.T) {
	old := &rotation.RotatingCredential{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", ResourceVersion: "1"},
		Spec: rotation.RotatingCredentialSpec{SecretRef: rotation.SecretReference{Name: "s"}}}
	typ := reflect.TypeOf(old.Spec.SecretRef)
	for i := range typ.NumField() {
		ref := old.Spec.SecretRef
		f := reflect.ValueOf(&ref).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		default:
			t.Fatalf("SecretReference.%s: a %s field; teach the test to change it", typ.Field(i).Name, f.Kind())
		}
		rc := old.DeepCopy()
		rc.Spec.SecretRef = ref
		refused := false
		errs := ValidateRotatingCredentialUpdate(rc, old)
		for _, e := range errs {
			refused = refused || strings.HasPrefix(e.Field, "spec.secretRef") && strings.Contains(e.Detail, "immutable")
		}
		if !refused {
			t.Errorf("secretRef.%s changed: %v, want it refused as immutable", typ.Field(i).Name, errs)
		}
	}
}
