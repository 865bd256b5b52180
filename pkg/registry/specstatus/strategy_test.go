package specstatus

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/serveridentity"
)

var caKind = Kind[*rotation.CertificateAuthority]{
	APIVersion:              "rotation.rekey.io/v1alpha1",
	Spec:                    func(c *rotation.CertificateAuthority) any { return &c.Spec },
	Status:                  func(c *rotation.CertificateAuthority) any { return &c.Status },
	CopyStatus:              func(dst, src *rotation.CertificateAuthority) { dst.Status = src.Status },
	CopySpec:                func(dst, src *rotation.CertificateAuthority) { dst.Spec = src.Spec },
	ValidateStatusUpdate:    func(n, o *rotation.CertificateAuthority) field.ErrorList { return nil },
	StatusByControllersOnly: true,
}

// TestStatusIsTheControllersAlone: only the controllers' identity writes a
// status marked so, however privileged the other writer.
func TestStatusIsTheControllersAlone(t *testing.T) {
	s := NewStatus(New(runtime.NewScheme(), caKind))
	old := &rotation.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "ca", ResourceVersion: "1"}}
	updated := old.DeepCopy()
	updated.Status.Current = &rotation.CACertificate{KeyID: "another-ca-key-1"}

	admin := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: serveridentity.UserName, Groups: []string{user.SystemPrivilegedGroup}})
	errs := s.ValidateUpdate(admin, updated, old)
	if len(errs) != 1 || errs[0].Field != "status" || !strings.Contains(errs[0].Detail, "controllers") {
		t.Fatalf("system:masters with the controllers' name: %v", errs)
	}
	id, err := serveridentity.New()
	if err != nil {
		t.Fatal(err)
	}
	if errs := s.ValidateUpdate(id.WithUser(context.Background()), updated, old); len(errs) != 0 {
		t.Fatalf("the controllers were refused: %v", errs)
	}
}

func TestStatusKeepsMetadata(t *testing.T) {
	s := NewStatus(New(runtime.NewScheme(), caKind))
	old := &rotation.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "ca", Labels: map[string]string{"a": "b"}, Generation: 3}}
	updated := old.DeepCopy()
	updated.Labels = nil
	updated.Finalizers = []string{"x"}
	updated.Generation = 9
	updated.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "rekey-ca-controller"}}
	s.PrepareForUpdate(context.Background(), updated, old)
	if updated.Labels["a"] != "b" || updated.Finalizers != nil || updated.Generation != 3 || len(updated.ManagedFields) != 1 {
		t.Fatalf("metadata changed through /status: %+v", updated.ObjectMeta)
	}
}
