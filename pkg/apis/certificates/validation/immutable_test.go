package validation

import (
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"rekey.io/rekey/pkg/apis/certificates"
)

// changeEachField calls update once per field of the struct v points to,
// with that field (only) changed from its value in *v. A field of a kind
// it cannot change fails the test, so that a new field is looked at.
func changeEachField(t *testing.T, v any, update func(name string, changed reflect.Value)) {
	t.Helper()
	typ := reflect.TypeOf(v).Elem()
	for i := range typ.NumField() {
		changed := reflect.New(typ).Elem()
		changed.Set(reflect.ValueOf(v).Elem())
		f := changed.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		default:
			t.Fatalf("%s.%s: a %s field; teach changeEachField to change it", typ.Name(), typ.Field(i).Name, f.Kind())
		}
		update(typ.Field(i).Name, changed)
	}
}

func refusedAt(errs field.ErrorList, prefix string) bool {
	for _, e := range errs {
		if strings.HasPrefix(e.Field, prefix) && strings.Contains(e.Detail, "immutable") {
			return true
		}
	}
	return false
}

// TestImmutableEveryField: every field of the fixed parts (a Signer's CA
// reference, a Revocation's spec), present and future, is refused when
// changed: the per-field checks name the field, the whole-struct check
// catches one not named yet.
func TestImmutableEveryField(t *testing.T) {
	oldSigner := &certificates.Signer{ObjectMeta: metav1.ObjectMeta{Name: "example.com:s", ResourceVersion: "1"}, Spec: certificates.SignerSpec{
		SignerName: "example.com/s", CertificateAuthorityRef: certificates.CertificateAuthorityReference{Name: "ca"}}}
	changeEachField(t, &oldSigner.Spec.CertificateAuthorityRef, func(name string, changed reflect.Value) {
		s := oldSigner.DeepCopy()
		s.Spec.CertificateAuthorityRef = changed.Interface().(certificates.CertificateAuthorityReference)
		if errs := ValidateSignerUpdate(s, oldSigner); !refusedAt(errs, "spec.certificateAuthorityRef") {
			t.Errorf("certificateAuthorityRef.%s changed: %v, want it refused as immutable", name, errs)
		}
	})
	oldRevocation := &certificates.Revocation{ObjectMeta: metav1.ObjectMeta{Name: "r", ResourceVersion: "1"}, Spec: certificates.RevocationSpec{
		SerialNumber: "0a", CAName: "ca", Reason: certificates.RevocationReason("KeyCompromise")}}
	changeEachField(t, &oldRevocation.Spec, func(name string, changed reflect.Value) {
		r := oldRevocation.DeepCopy()
		r.Spec = changed.Interface().(certificates.RevocationSpec)
		if errs := ValidateRevocationUpdate(r, oldRevocation); !refusedAt(errs, "spec") {
			t.Errorf("spec.%s changed: %v, want it refused as immutable", name, errs)
		}
	})
}
