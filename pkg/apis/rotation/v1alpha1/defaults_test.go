package v1alpha1

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestCertificateAuthorityDefaults(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ca := &CertificateAuthority{}
	scheme.Default(ca)
	if ca.Spec.KeyAlgorithm != ECDSAP256 || ca.Spec.Validity.Duration != DefaultValidity || ca.Spec.KeyStore.Type != KeyStoreEtcd {
		t.Fatalf("defaults %+v", ca.Spec)
	}
	set := &CertificateAuthority{Spec: CertificateAuthoritySpec{KeyAlgorithm: RSA3072, Validity: metav1.Duration{Duration: time.Hour}, KeyStore: KeyStore{Type: KeyStorePKCS11}}}
	scheme.Default(set)
	if set.Spec.KeyAlgorithm != RSA3072 || set.Spec.Validity.Duration != time.Hour || set.Spec.KeyStore.Type != KeyStorePKCS11 {
		t.Fatalf("defaulting overwrote set fields: %+v", set.Spec)
	}
}

func TestRotatingCredentialDefaults(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	rc := &RotatingCredential{Spec: RotatingCredentialSpec{Minter: Minter{Type: MinterRandom, Random: &RandomMinter{}}}}
	scheme.Default(rc)
	if rc.Spec.RotationInterval.Duration != DefaultRotationInterval || rc.Spec.GracePeriod.Duration != DefaultGracePeriod ||
		rc.Spec.Minter.Random.Key != "token" || rc.Spec.Minter.Random.Length != 32 {
		t.Fatalf("defaults %+v", rc.Spec)
	}
}

// TestRotationPolicyDefaults: 2m of trust propagation and a 10m renewal
// window when unset (a stored CA from before spec.rotation gets them on
// read), and 0s kept as 0s (no wait; renew at once).
func TestRotationPolicyDefaults(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ca := &CertificateAuthority{}
	scheme.Default(ca)
	if r := ca.Spec.Rotation; r == nil || r.TrustPropagation.Duration != 2*time.Minute || r.RenewalWindow.Duration != 10*time.Minute {
		t.Fatalf("spec.rotation defaults %+v", ca.Spec.Rotation)
	}
	zero := &CertificateAuthority{Spec: CertificateAuthoritySpec{Rotation: &RotationPolicy{TrustPropagation: &metav1.Duration{}, RenewalWindow: &metav1.Duration{}}}}
	scheme.Default(zero)
	if zero.Spec.Rotation.TrustPropagation.Duration != 0 || zero.Spec.Rotation.RenewalWindow.Duration != 0 {
		t.Fatalf("0s not kept: %+v", zero.Spec.Rotation)
	}
	half := &CertificateAuthority{Spec: CertificateAuthoritySpec{Rotation: &RotationPolicy{RenewalWindow: &metav1.Duration{Duration: time.Minute}}}}
	scheme.Default(half)
	if half.Spec.Rotation.TrustPropagation.Duration != 2*time.Minute || half.Spec.Rotation.RenewalWindow.Duration != time.Minute {
		t.Fatalf("a set window lost, or the unset propagation not defaulted: %+v", half.Spec.Rotation)
	}
}

// type Random with its block left empty ("random:" in YAML, which is null)
// is defaulted like "random: {}", not refused as a missing block.
func TestRandomMinterWithoutItsBlockIsDefaulted(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	rc := &RotatingCredential{Spec: RotatingCredentialSpec{Minter: Minter{Type: MinterRandom}}}
	scheme.Default(rc)
	if r := rc.Spec.Minter.Random; r == nil || r.Key != DefaultRandomKey || r.Length != DefaultRandomLength {
		t.Fatalf("random block %+v, want key %q length %d", r, DefaultRandomKey, DefaultRandomLength)
	}
	other := &RotatingCredential{Spec: RotatingCredentialSpec{Minter: Minter{Type: MinterWebhook}}}
	scheme.Default(other)
	if other.Spec.Minter.Random != nil {
		t.Fatalf("a Webhook minter got a random block: %+v", other.Spec.Minter.Random)
	}
}
