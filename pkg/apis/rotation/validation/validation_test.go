package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/signing/keystorepaths"
	"rekey.io/rekey/test/fixtures"
)

func etcdCA() *rotation.CertificateAuthority {
	return &rotation.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: "team-ca", ResourceVersion: "1"},
		Spec: rotation.CertificateAuthoritySpec{CommonName: "team", KeyAlgorithm: rotation.ECDSAP256,
			Validity: metav1.Duration{Duration: 24 * time.Hour}, KeyStore: rotation.KeyStore{Type: rotation.KeyStoreEtcd},
			Purpose: rotation.PurposeCertificates},
	}
}

func hasError(errs field.ErrorList, fieldPath, contains string) bool {
	for _, e := range errs {
		if e.Field == fieldPath && strings.Contains(e.Error(), contains) {
			return true
		}
	}
	return false
}

func TestValidateCertificateAuthority(t *testing.T) {
	tests := map[string]struct {
		mutate    func(*rotation.CertificateAuthority)
		wantField string
	}{
		"valid":              {mutate: func(*rotation.CertificateAuthority) {}},
		"no common name":     {mutate: func(c *rotation.CertificateAuthority) { c.Spec.CommonName = "" }, wantField: "spec.commonName"},
		"unknown algorithm":  {mutate: func(c *rotation.CertificateAuthority) { c.Spec.KeyAlgorithm = "DSA" }, wantField: "spec.keyAlgorithm"},
		"short validity":     {mutate: func(c *rotation.CertificateAuthority) { c.Spec.Validity.Duration = time.Minute }, wantField: "spec.validity"},
		"unknown store":      {mutate: func(c *rotation.CertificateAuthority) { c.Spec.KeyStore.Type = "Vault" }, wantField: "spec.keyStore.type"},
		"file block on etcd": {mutate: func(c *rotation.CertificateAuthority) { c.Spec.KeyStore.File = &rotation.FileKeyStore{} }, wantField: "spec.keyStore.file"},
		"relative file path": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.KeyStore = rotation.KeyStore{Type: rotation.KeyStoreFile, File: &rotation.FileKeyStore{CertFile: "ca.crt", KeyFile: "/ca.key"}}
		}, wantField: "spec.keyStore.file.certFile"},
		"PKCS11 with Ed25519": {mutate: func(c *rotation.CertificateAuthority) {
			c.Spec.KeyAlgorithm = rotation.Ed25519
			c.Spec.KeyStore = rotation.KeyStore{Type: rotation.KeyStorePKCS11, Pkcs11: &rotation.PKCS11KeyStore{ModulePath: "/m.so", TokenLabel: "t", PINFile: "/pin"}}
		}, wantField: "spec.keyAlgorithm"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ca := etcdCA()
			tc.mutate(ca)
			errs := ValidateCertificateAuthority(ca)
			if tc.wantField == "" && len(errs) != 0 {
				t.Fatalf("refused: %v", errs)
			}
			if tc.wantField != "" && !hasError(errs, tc.wantField, "") {
				t.Fatalf("want an error on %s, got %v", tc.wantField, errs)
			}
		})
	}
}

func TestValidateKeyStorePaths(t *testing.T) {
	allowed := keystorepaths.Allowed{PKCS11Modules: []string{"/usr/lib/softhsm/libsofthsm2.so"}, Dirs: []string{"/etc/rekey"}}
	ca := etcdCA()
	ca.Spec.KeyStore = rotation.KeyStore{Type: rotation.KeyStorePKCS11, Pkcs11: &rotation.PKCS11KeyStore{ModulePath: "/tmp/evil.so", TokenLabel: "t", PINFile: "/etc/rekey/pin"}}
	if errs := ValidateKeyStorePaths(ca, allowed); !hasError(errs, "spec.keyStore.pkcs11.modulePath", "--pkcs11-module") {
		t.Fatalf("module outside the allow-list: %v", errs)
	}
	ca.Spec.KeyStore.Pkcs11.ModulePath = "/usr/lib/softhsm/libsofthsm2.so"
	if errs := ValidateKeyStorePaths(ca, allowed); len(errs) != 0 {
		t.Fatalf("allowed module refused: %v", errs)
	}
	ca.Spec.KeyStore = rotation.KeyStore{Type: rotation.KeyStoreFile, File: &rotation.FileKeyStore{CertFile: "/etc/rekey/ca.crt", KeyFile: "/etc/rekey/../shadow"}}
	if errs := ValidateKeyStorePaths(ca, allowed); !hasError(errs, "spec.keyStore.file.keyFile", "clean") {
		t.Fatalf("path with ..: %v", errs)
	}
}

func TestValidateCertificateAuthorityStatus(t *testing.T) {
	cert := string(fixtures.SelfSignedCertPEM(t, "team"))
	good := rotation.CertificateAuthorityStatus{
		Current:     &rotation.CACertificate{Certificate: cert, KeyID: "team-ca-0123abcd-1"},
		TrustBundle: cert + cert,
		Conditions:  []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "KeyAvailable", LastTransitionTime: metav1.Now()}},
	}
	path := field.NewPath("status")
	if errs := ValidateCertificateAuthorityStatus(&good, path); len(errs) != 0 {
		t.Fatalf("valid status refused: %v", errs)
	}
	tests := map[string]struct {
		mutate    func(*rotation.CertificateAuthorityStatus)
		wantField string
	}{
		"key ID leaving the prefix": {mutate: func(s *rotation.CertificateAuthorityStatus) { s.Current.KeyID = "../kek-check" }, wantField: "status.current.keyID"},
		"unknown phase":             {mutate: func(s *rotation.CertificateAuthorityStatus) { s.Phase = "Done" }, wantField: "status.phase"},
		"two-faced certificate":     {mutate: func(s *rotation.CertificateAuthorityStatus) { s.Current.Certificate = "text\n" + cert }, wantField: "status.current.certificate"},
		"private key in bundle": {mutate: func(s *rotation.CertificateAuthorityStatus) {
			s.TrustBundle = cert + "-----BEGIN PRIVATE KEY-----\nYWJj\n-----END PRIVATE KEY-----\n"
		}, wantField: "status.trustBundle"},
		"condition without reason": {mutate: func(s *rotation.CertificateAuthorityStatus) { s.Conditions[0].Reason = "" }, wantField: "status.conditions[0].reason"},
		"too many conditions": {mutate: func(s *rotation.CertificateAuthorityStatus) {
			for i := 0; i < MaxConditions; i++ {
				s.Conditions = append(s.Conditions, s.Conditions[0])
			}
		}, wantField: "status.conditions"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := good.DeepCopy()
			tc.mutate(s)
			if errs := ValidateCertificateAuthorityStatus(s, path); !hasError(errs, tc.wantField, "") {
				t.Fatalf("want an error on %s, got %v", tc.wantField, errs)
			}
		})
	}
}

func TestPublish(t *testing.T) {
	ca := etcdCA()
	ca.Spec.Publish = &rotation.Publish{ConfigMaps: &rotation.ConfigMapPublish{Namespaces: []string{"ok", "Not_OK"}, Name: "bad name"}}
	errs := ValidateCertificateAuthority(ca)
	if !hasError(errs, "spec.publish.configMaps.namespaces[1]", "") || !hasError(errs, "spec.publish.configMaps.name", "") {
		t.Fatalf("invalid publish accepted: %v", errs)
	}
	ca.Spec.Publish = &rotation.Publish{ConfigMaps: &rotation.ConfigMapPublish{}}
	if errs := ValidateCertificateAuthority(ca); !hasError(errs, "spec.publish.configMaps", "namespaces or namespaceSelector") {
		t.Fatalf("publish to nowhere accepted: %v", errs)
	}
	// publish may change on update; nothing else in spec may.
	old := etcdCA()
	updated := old.DeepCopy()
	updated.Spec.Publish = &rotation.Publish{ClusterTrustBundle: true, ConfigMaps: &rotation.ConfigMapPublish{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}}}
	if errs := ValidateCertificateAuthorityUpdate(updated, old); len(errs) != 0 {
		t.Fatalf("changing publish refused: %v", errs)
	}
	updated.Spec.CommonName = "other"
	if errs := ValidateCertificateAuthorityUpdate(updated, old); !hasError(errs, "spec.commonName", "immutable") {
		t.Fatalf("changing the common name accepted: %v", errs)
	}
}

// spec.rotation paces a rotation: 0s up to a bound, and an operator may
// change it at any time (the built-in CAs included), as spec.publish.
func TestRotationPolicy(t *testing.T) {
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	tests := map[string]struct {
		policy    *rotation.RotationPolicy
		wantField string
		wantMsg   string
	}{
		"unset":                {},
		"zero":                 {policy: &rotation.RotationPolicy{TrustPropagation: d(0), RenewalWindow: d(0)}},
		"at the bounds":        {policy: &rotation.RotationPolicy{TrustPropagation: d(24 * time.Hour), RenewalWindow: d(7 * 24 * time.Hour)}},
		"negative propagation": {policy: &rotation.RotationPolicy{TrustPropagation: d(-time.Second)}, wantField: "spec.rotation.trustPropagation", wantMsg: "between 0s and 24h"},
		"long propagation":     {policy: &rotation.RotationPolicy{TrustPropagation: d(25 * time.Hour)}, wantField: "spec.rotation.trustPropagation", wantMsg: "24h"},
		"negative window":      {policy: &rotation.RotationPolicy{RenewalWindow: d(-time.Second)}, wantField: "spec.rotation.renewalWindow", wantMsg: "between 0s and"},
		"long window":          {policy: &rotation.RotationPolicy{RenewalWindow: d(8 * 24 * time.Hour)}, wantField: "spec.rotation.renewalWindow", wantMsg: "7 days"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ca := etcdCA()
			ca.Spec.Rotation = tc.policy
			for what, errs := range map[string]field.ErrorList{"create": ValidateCertificateAuthority(ca), "update": ValidateCertificateAuthorityUpdate(ca, etcdCA())} {
				if tc.wantField == "" && len(errs) != 0 {
					t.Fatalf("%s refused: %v", what, errs)
				}
				if tc.wantField != "" && !hasError(errs, tc.wantField, tc.wantMsg) {
					t.Fatalf("%s: want an error on %s saying %q, got %v", what, tc.wantField, tc.wantMsg, errs)
				}
			}
		})
	}
	// Changing spec.rotation of a built-in CA is an update like any other.
	old := etcdCA()
	old.Labels = map[string]string{"rekey.io/built-in": "true"}
	old.Spec.Rotation = &rotation.RotationPolicy{TrustPropagation: d(2 * time.Minute), RenewalWindow: d(10 * time.Minute)}
	updated := old.DeepCopy()
	updated.Spec.Rotation = &rotation.RotationPolicy{TrustPropagation: d(0), RenewalWindow: d(time.Hour)}
	if errs := ValidateCertificateAuthorityUpdate(updated, old); len(errs) != 0 {
		t.Fatalf("changing spec.rotation refused: %v", errs)
	}
}

// TestTrustStatusIsBounded: status.trust stays small however many
// consumers wait, and its counts are consistent.
func TestTrustStatusIsBounded(t *testing.T) {
	for name, tc := range map[string]struct {
		trust rotation.TrustStatus
		field string
	}{
		"ok":              {trust: rotation.TrustStatus{Consumers: 5000, Waiting: 4000, WaitingFor: make([]string, MaxPendingListed)}},
		"waiting > total": {trust: rotation.TrustStatus{Consumers: 1, Waiting: 2}, field: "status.trust.waiting"},
		"negative":        {trust: rotation.TrustStatus{Consumers: -1}, field: "status.trust.waiting"},
		"long list":       {trust: rotation.TrustStatus{Consumers: 50, Waiting: 50, WaitingFor: make([]string, MaxPendingListed+1)}, field: "status.trust.waitingFor"},
		"long reason":     {trust: rotation.TrustStatus{Unpublished: []string{strings.Repeat("x", MaxUnpublishedLength+1)}}, field: "status.trust.unpublished[0]"},
	} {
		trust := tc.trust
		errs := ValidateCertificateAuthorityStatus(&rotation.CertificateAuthorityStatus{Trust: &trust}, field.NewPath("status"))
		if tc.field == "" && len(errs) != 0 || tc.field != "" && !hasError(errs, tc.field, "") {
			t.Errorf("%s: %v", name, errs)
		}
	}
}
