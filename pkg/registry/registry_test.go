package registry

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/serveridentity"
)

// TestControllersOnly: only the controllers' identity passes, however
// privileged the other writer and whatever its name.
func TestControllersOnly(t *testing.T) {
	forged := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: serveridentity.UserName, Groups: []string{user.SystemPrivilegedGroup}})
	errs := ControllersOnly(forged)
	if len(errs) != 1 || errs[0].Field != "status" || !strings.Contains(errs[0].Detail, "controllers") {
		t.Fatalf("system:masters with the controllers' name: %v", errs)
	}
	if errs := ControllersOnly(context.Background()); len(errs) != 1 {
		t.Fatalf("no user: %v", errs)
	}
	id, err := serveridentity.New()
	if err != nil {
		t.Fatal(err)
	}
	if errs := ControllersOnly(id.WithUser(context.Background())); len(errs) != 0 {
		t.Fatalf("the controllers were refused: %v", errs)
	}
}

func TestKeepMetadata(t *testing.T) {
	old := &rotation.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "ca", Labels: map[string]string{"a": "b"}, Generation: 3, ResourceVersion: "7"}}
	updated := old.DeepCopy()
	updated.Labels = nil
	updated.Annotations = map[string]string{"x": "y"}
	updated.Finalizers = []string{"x"}
	updated.OwnerReferences = []metav1.OwnerReference{{Name: "o"}}
	updated.Generation = 9
	updated.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "rekey-ca-controller"}}
	KeepMetadata(updated, old)
	if updated.Labels["a"] != "b" || updated.Annotations != nil || updated.Finalizers != nil || updated.OwnerReferences != nil || updated.Generation != 3 {
		t.Fatalf("metadata changed: %+v", updated.ObjectMeta)
	}
	if len(updated.ManagedFields) != 1 || updated.ResourceVersion != "7" {
		t.Fatalf("managed fields or resource version of the write lost: %+v", updated.ObjectMeta)
	}
}
