package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"rekey.io/rekey/pkg/apis/rotation"
)

// The messages issue #32 asked for: each names its field and never prints
// a Go struct.

func requireMessage(t *testing.T, errs field.ErrorList, fieldPath, contains string) {
	t.Helper()
	if !hasError(errs, fieldPath, contains) {
		t.Fatalf("want an error on %s containing %q, got %v", fieldPath, contains, errs)
	}
	if msg := errs.ToAggregate().Error(); strings.Contains(msg, `{"`) || strings.Contains(msg, "&{") {
		t.Errorf("the message prints a Go struct: %s", msg)
	}
}

func TestImmutableCertificateAuthorityFieldsAreNamed(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate         func(*rotation.CertificateAuthoritySpec)
		path, contains string
	}{
		"commonName": {func(s *rotation.CertificateAuthoritySpec) { s.CommonName = "x" }, "spec.commonName",
			`Invalid value: "x": field is immutable: the CA's key and certificate were made from it; create another CertificateAuthority to change it`},
		"keyAlgorithm": {func(s *rotation.CertificateAuthoritySpec) { s.KeyAlgorithm = rotation.RSA3072 }, "spec.keyAlgorithm", `Invalid value: "RSA-3072": field is immutable`},
		"validity":     {func(s *rotation.CertificateAuthoritySpec) { s.Validity.Duration = time.Hour }, "spec.validity", `Invalid value: "1h0m0s": field is immutable`},
		"keyStore.type": {func(s *rotation.CertificateAuthoritySpec) {
			s.KeyStore = rotation.KeyStore{Type: rotation.KeyStoreFile, File: &rotation.FileKeyStore{CertFile: "/a", KeyFile: "/b"}}
		}, "spec.keyStore.type", `Invalid value: "File": field is immutable`},
	} {
		t.Run(name, func(t *testing.T) {
			old := etcdCA()
			ca := old.DeepCopy()
			tc.mutate(&ca.Spec)
			requireMessage(t, ValidateCertificateAuthorityUpdate(ca, old), tc.path, tc.contains)
		})
	}
	t.Run("publish and rotation may change", func(t *testing.T) {
		old := etcdCA()
		ca := old.DeepCopy()
		ca.Spec.Publish = &rotation.Publish{ClusterTrustBundle: true}
		if errs := ValidateCertificateAuthorityUpdate(ca, old); len(errs) > 0 {
			t.Fatal(errs)
		}
	})
}

func TestImmutableCredentialFieldsAreNamed(t *testing.T) {
	old := validCredential()
	old.ResourceVersion = "1"
	rc := old.DeepCopy()
	rc.Spec.SecretRef.Name = "other"
	requireMessage(t, ValidateRotatingCredentialUpdate(rc, old), "spec.secretRef.name", `Invalid value: "other": field is immutable`)
}

func TestClientCertificateMinterForSystemMastersIsRefused(t *testing.T) {
	rc := validCredential()
	rc.Spec.Minter = rotation.Minter{Type: rotation.MinterClientCertificate, ClientCertificate: &rotation.ClientCertificateMinter{
		SignerName: "example.com/team", CommonName: "app", Organizations: []string{"dev", "system:masters"},
		Duration: &metav1.Duration{Duration: time.Hour}}}
	requireMessage(t, ValidateRotatingCredential(rc), "spec.minter.clientCertificate.organizations[1]",
		`Forbidden: group "system:masters" is never certified: it bypasses all authorization`)
	rc.Spec.Minter.ClientCertificate.Organizations = []string{"dev"}
	if errs := ValidateRotatingCredential(rc); len(errs) > 0 {
		t.Fatal(errs)
	}
}

func TestRandomKeyOldIsRefused(t *testing.T) {
	rc := validCredential()
	rc.Spec.Minter.Random.Key = "token.old"
	requireMessage(t, ValidateRotatingCredential(rc), "spec.minter.random.key", `must not end in ".old", which rekey keeps for the previous credential`)
}
