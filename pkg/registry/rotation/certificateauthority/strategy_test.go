package certificateauthority

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/serveridentity"
	"rekey.io/rekey/pkg/signing/keystorepaths"
)

func newCA() *rotation.CertificateAuthority {
	return &rotation.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: "team-ca", ResourceVersion: "1"},
		Spec: rotation.CertificateAuthoritySpec{CommonName: "team", KeyAlgorithm: rotation.ECDSAP256,
			Validity: metav1.Duration{Duration: 24 * time.Hour}, KeyStore: rotation.KeyStore{Type: rotation.KeyStoreEtcd},
			Purpose: rotation.PurposeCertificates},
	}
}

func TestCreateClearsStatusAndChecksAllowLists(t *testing.T) {
	s := NewStrategy(runtime.NewScheme(), keystorepaths.Allowed{Dirs: []string{"/etc/rekey"}})
	ca := newCA()
	ca.Status.Current = &rotation.CACertificate{KeyID: "another-ca-1"}
	s.PrepareForCreate(context.Background(), ca)
	if ca.Status.Current != nil || ca.Generation != 1 {
		t.Fatalf("status %+v, generation %d", ca.Status, ca.Generation)
	}
	if errs := s.Validate(context.Background(), ca); len(errs) != 0 {
		t.Fatalf("valid CA refused: %v", errs)
	}
	ca.Spec.KeyStore = rotation.KeyStore{Type: rotation.KeyStoreFile, File: &rotation.FileKeyStore{CertFile: "/etc/rekey/ca.crt", KeyFile: "/root/ca.key"}}
	errs := s.Validate(context.Background(), ca)
	if len(errs) != 1 || errs[0].Field != "spec.keyStore.file.keyFile" {
		t.Fatalf("key file outside the allowed directory: %v", errs)
	}
}

func TestMainResourceKeepsStatusAndSpecIsImmutable(t *testing.T) {
	s := NewStrategy(runtime.NewScheme(), keystorepaths.Allowed{})
	old := newCA()
	old.Status.Phase = rotation.PhasePrepared
	updated := old.DeepCopy()
	updated.Status.Phase = ""
	updated.Spec.CommonName = "other"
	s.PrepareForUpdate(context.Background(), updated, old)
	if updated.Status.Phase != rotation.PhasePrepared {
		t.Fatal("status changed through the main resource")
	}
	if errs := s.ValidateUpdate(context.Background(), updated, old); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "immutable") {
		t.Fatalf("spec change accepted: %v", errs)
	}
}

func TestStatusIsTheControllersAlone(t *testing.T) {
	s := NewStatusStrategy(NewStrategy(runtime.NewScheme(), keystorepaths.Allowed{}))
	old := newCA()
	updated := old.DeepCopy()
	updated.Status.Current = &rotation.CACertificate{KeyID: "another-ca-1"}
	updated.Spec.CommonName = "changed"
	updated.Labels = map[string]string{"x": "y"}
	s.PrepareForUpdate(context.Background(), updated, old)
	if updated.Spec.CommonName != "team" || updated.Labels != nil {
		t.Fatalf("spec or metadata changed through /status: %+v %+v", updated.Spec, updated.ObjectMeta)
	}
	if errs := s.ValidateUpdate(context.Background(), updated, old); len(errs) != 1 || errs[0].Field != "status" {
		t.Fatalf("a client's status write: %v", errs)
	}
	id, err := serveridentity.New()
	if err != nil {
		t.Fatal(err)
	}
	// The controllers pass ownership, and their write is still validated:
	// a status with no certificate for the key ID is refused.
	if errs := s.ValidateUpdate(id.WithUser(context.Background()), updated, old); len(errs) == 0 || errs[0].Field != "status.current.certificate" {
		t.Fatalf("the controllers' invalid status: %v", errs)
	}
}

func TestResetFields(t *testing.T) {
	base := NewStrategy(runtime.NewScheme(), keystorepaths.Allowed{})
	if got := base.GetResetFields()[apiVersion].String(); got != ".status" {
		t.Errorf("main resource resets %s", got)
	}
	if got := NewStatusStrategy(base).GetResetFields()[apiVersion].String(); got != ".spec" {
		t.Errorf("/status resets %s", got)
	}
}
