package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/apis/rotation"
)

func validCredential() *rotation.RotatingCredential {
	return &rotation.RotatingCredential{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "team"},
		Spec: rotation.RotatingCredentialSpec{SecretRef: rotation.SecretReference{Name: "db"},
			RotationInterval: &metav1.Duration{Duration: time.Hour}, GracePeriod: &metav1.Duration{Duration: 10 * time.Minute},
			Minter: rotation.Minter{Type: rotation.MinterRandom, Random: &rotation.RandomMinter{Key: "token", Length: 32}}},
	}
}

func TestValidateRotatingCredential(t *testing.T) {
	if errs := ValidateRotatingCredential(validCredential()); len(errs) > 0 {
		t.Fatal(errs)
	}
	timeout := int32(60)
	for name, tc := range map[string]struct {
		mutate         func(*rotation.RotatingCredential)
		path, contains string
	}{
		"no Secret":          {func(r *rotation.RotatingCredential) { r.Spec.SecretRef.Name = "" }, "spec.secretRef.name", "Required"},
		"interval under 30s": {func(r *rotation.RotatingCredential) { r.Spec.RotationInterval.Duration = 10 * time.Second }, "spec.rotationInterval", "at least 30s"},
		"grace not shorter":  {func(r *rotation.RotatingCredential) { r.Spec.GracePeriod.Duration = time.Hour }, "spec.gracePeriod", "shorter than rotationInterval"},
		"unknown minter":     {func(r *rotation.RotatingCredential) { r.Spec.Minter.Type = "Magic" }, "spec.minter.type", "Unsupported"},
		"missing block":      {func(r *rotation.RotatingCredential) { r.Spec.Minter.Random = nil }, "spec.minter.random", "Required"},
		"two blocks": {func(r *rotation.RotatingCredential) {
			r.Spec.Minter.Webhook = &rotation.WebhookMinter{URL: "https://x"}
		}, "spec.minter.webhook", "only the block of type Random"},
		"key with a slash":  {func(r *rotation.RotatingCredential) { r.Spec.Minter.Random.Key = "a/b" }, "spec.minter.random.key", "Invalid"},
		"length 0":          {func(r *rotation.RotatingCredential) { r.Spec.Minter.Random.Length = 0 }, "spec.minter.random.length", "1 to"},
		"repeated alphabet": {func(r *rotation.RotatingCredential) { r.Spec.Minter.Random.Alphabet = "aab" }, "spec.minter.random.alphabet", "distinct"},
		"webhook over http": {func(r *rotation.RotatingCredential) {
			r.Spec.Minter = rotation.Minter{Type: rotation.MinterWebhook, Webhook: &rotation.WebhookMinter{URL: "http://mint.example.com"}}
		}, "spec.minter.webhook.url", "https"},
		"webhook with a long timeout": {func(r *rotation.RotatingCredential) {
			r.Spec.Minter = rotation.Minter{Type: rotation.MinterWebhook, Webhook: &rotation.WebhookMinter{URL: "https://mint.example.com", TimeoutSeconds: &timeout}}
		}, "spec.minter.webhook.timeoutSeconds", "1 to 30"},
		"webhook CA that is not PEM": {func(r *rotation.RotatingCredential) {
			r.Spec.Minter = rotation.Minter{Type: rotation.MinterWebhook, Webhook: &rotation.WebhookMinter{URL: "https://mint.example.com", CABundle: []byte("nope")}}
		}, "spec.minter.webhook.caBundle", "Invalid"},
		"client certificate without a signer": {func(r *rotation.RotatingCredential) {
			r.Spec.Minter = rotation.Minter{Type: rotation.MinterClientCertificate, ClientCertificate: &rotation.ClientCertificateMinter{CommonName: "app"}}
		}, "spec.minter.clientCertificate.signerName", ""},
		"token for a bad service account name": {func(r *rotation.RotatingCredential) {
			r.Spec.Minter = rotation.Minter{Type: rotation.MinterServiceAccountToken, ServiceAccountToken: &rotation.ServiceAccountTokenMinter{ServiceAccountName: "Bad_Name"}}
		}, "spec.minter.serviceAccountToken.serviceAccountName", "Invalid"},
	} {
		t.Run(name, func(t *testing.T) {
			rc := validCredential()
			tc.mutate(rc)
			if errs := ValidateRotatingCredential(rc); !hasError(errs, tc.path, tc.contains) {
				t.Fatalf("want an error on %s containing %q, got %v", tc.path, tc.contains, errs)
			}
		})
	}
}

func TestRotatingCredentialUpdateKeepsSecretAndMinterType(t *testing.T) {
	old := validCredential()
	old.ResourceVersion = "1"
	for path, mutate := range map[string]func(*rotation.RotatingCredential){
		"spec.secretRef.name": func(r *rotation.RotatingCredential) { r.Spec.SecretRef.Name = "other" },
		"spec.minter.type": func(r *rotation.RotatingCredential) {
			r.Spec.Minter = rotation.Minter{Type: rotation.MinterWebhook, Webhook: &rotation.WebhookMinter{URL: "https://x"}}
		},
	} {
		rc := old.DeepCopy()
		mutate(rc)
		if errs := ValidateRotatingCredentialUpdate(rc, old); !hasError(errs, path, "immutable") {
			t.Errorf("%s: %v", path, errs)
		}
	}
	rc := old.DeepCopy()
	rc.Spec.RotationInterval.Duration = 2 * time.Hour
	if errs := ValidateRotatingCredentialUpdate(rc, old); len(errs) > 0 {
		t.Fatalf("a new interval refused: %v", errs)
	}
}

func TestCredentialStatusGenerationNeverDecreases(t *testing.T) {
	old := validCredential()
	old.ResourceVersion = "1"
	old.Status.CredentialGeneration = 3
	rc := old.DeepCopy()
	rc.Status.CredentialGeneration = 2
	if errs := ValidateRotatingCredentialStatusUpdate(rc, old); !hasError(errs, "status.credentialGeneration", "decrease") {
		t.Fatal(errs)
	}
}

// The request generations never go back (a status write keeps them and
// /rotate stamps the current generation), and a claim is a SHA-256.
func TestCredentialStatusRequestsAndClaim(t *testing.T) {
	old := validCredential()
	old.ResourceVersion = "1"
	old.Status.CredentialGeneration, old.Status.RotationRequestedGeneration, old.Status.CompletionRequestedGeneration = 3, 3, 2
	rc := old.DeepCopy()
	rc.Status.RotationRequestedGeneration, rc.Status.CompletionRequestedGeneration = 1, 1
	rc.Status.SecretClaim = "not a hash"
	errs := ValidateRotatingCredentialStatusUpdate(rc, old)
	for _, f := range []string{"status.rotationRequestedGeneration", "status.completionRequestedGeneration", "status.secretClaim"} {
		if !hasError(errs, f, "") {
			t.Errorf("no error on %s: %v", f, errs)
		}
	}
	rc = old.DeepCopy()
	rc.Status.SecretClaim = strings.Repeat("ab", 32)
	if errs := ValidateRotatingCredentialStatusUpdate(rc, old); len(errs) > 0 {
		t.Fatal(errs)
	}
}
