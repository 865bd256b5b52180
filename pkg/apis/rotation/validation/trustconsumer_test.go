package validation

import (
	"crypto/x509"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/signing"
)

func fp(i int) string { return fmt.Sprintf("SHA256:%064x", i) }

func trustConsumer() *rotation.TrustConsumer {
	return &rotation.TrustConsumer{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver.node-1"},
		Spec:       rotation.TrustConsumerSpec{CertificateAuthorities: []string{"a", "rekey.io-kube-apiserver-client"}, Reporter: "system:node:node-1"},
		Status: rotation.TrustConsumerStatus{Holds: []rotation.TrustHeld{
			{CertificateAuthority: "a", Fingerprints: []string{fp(1), fp(2)}},
			{CertificateAuthority: "rekey.io-kube-apiserver-client"},
		}},
	}
}

// The format accepted is exactly what signing.Fingerprint writes, so that
// a consumer reports what the CA's status shows.
func TestFingerprintFormatIsSigningsFingerprint(t *testing.T) {
	got := signing.Fingerprint(&x509.Certificate{Raw: []byte("any DER")})
	if !fingerprintPattern.MatchString(got) {
		t.Fatalf("signing.Fingerprint writes %q, which validation refuses", got)
	}
}

func TestValidateTrustConsumer(t *testing.T) {
	tests := map[string]struct {
		mutate    func(*rotation.TrustConsumer)
		wantField string
		wantMsg   string
	}{
		"valid":         {mutate: func(*rotation.TrustConsumer) {}},
		"no status":     {mutate: func(c *rotation.TrustConsumer) { c.Status = rotation.TrustConsumerStatus{} }},
		"bad name":      {mutate: func(c *rotation.TrustConsumer) { c.Name = "Node_1" }, wantField: "metadata.name"},
		"no CAs":        {mutate: func(c *rotation.TrustConsumer) { c.Spec.CertificateAuthorities = nil; c.Status.Holds = nil }, wantField: "spec.certificateAuthorities", wantMsg: "1 to 16"},
		"empty CA name": {mutate: func(c *rotation.TrustConsumer) { c.Spec.CertificateAuthorities[1] = "" }, wantField: "spec.certificateAuthorities[1]"},
		"bad CA name":   {mutate: func(c *rotation.TrustConsumer) { c.Spec.CertificateAuthorities[1] = "rekey.io/kube" }, wantField: "spec.certificateAuthorities[1]"},
		"duplicate CA":  {mutate: func(c *rotation.TrustConsumer) { c.Spec.CertificateAuthorities[1] = "a" }, wantField: "spec.certificateAuthorities[1]", wantMsg: "Duplicate"},
		"no reporter":   {mutate: func(c *rotation.TrustConsumer) { c.Spec.Reporter = "" }, wantField: "spec.reporter"},
		"too many CAs":  {mutate: func(c *rotation.TrustConsumer) { c.Spec.CertificateAuthorities = manyNames(17) }, wantField: "spec.certificateAuthorities", wantMsg: "16"},
		"16 CAs": {mutate: func(c *rotation.TrustConsumer) {
			c.Spec.CertificateAuthorities = append(manyNames(14), "a", "rekey.io-kube-apiserver-client")
		}},
		"hold unnamed": {mutate: func(c *rotation.TrustConsumer) { c.Status.Holds[1].CertificateAuthority = "b" }, wantField: "status.holds[1].certificateAuthority", wantMsg: "spec.certificateAuthorities"},
		"hold twice":   {mutate: func(c *rotation.TrustConsumer) { c.Status.Holds[1].CertificateAuthority = "a" }, wantField: "status.holds[1].certificateAuthority", wantMsg: "Duplicate"},
		"hold no CA":   {mutate: func(c *rotation.TrustConsumer) { c.Status.Holds[1].CertificateAuthority = "" }, wantField: "status.holds[1].certificateAuthority"},
		"no prefix":    {mutate: func(c *rotation.TrustConsumer) { c.Status.Holds[0].Fingerprints[0] = fp(10)[7:] }, wantField: "status.holds[0].fingerprints[0]", wantMsg: "SHA256:"},
		"uppercase hex": {mutate: func(c *rotation.TrustConsumer) {
			c.Status.Holds[0].Fingerprints[0] = "SHA256:" + strings.Repeat("AB", 32)
		}, wantField: "status.holds[0].fingerprints[0]"},
		"short":          {mutate: func(c *rotation.TrustConsumer) { c.Status.Holds[0].Fingerprints[1] = "SHA256:abcd" }, wantField: "status.holds[0].fingerprints[1]"},
		"other hash":     {mutate: func(c *rotation.TrustConsumer) { c.Status.Holds[0].Fingerprints[1] = "SHA1:" + strings.Repeat("a", 64) }, wantField: "status.holds[0].fingerprints[1]"},
		"trailing text":  {mutate: func(c *rotation.TrustConsumer) { c.Status.Holds[0].Fingerprints[1] = fp(3) + "\n" }, wantField: "status.holds[0].fingerprints[1]"},
		"duplicate fp":   {mutate: func(c *rotation.TrustConsumer) { c.Status.Holds[0].Fingerprints[1] = fp(1) }, wantField: "status.holds[0].fingerprints[1]", wantMsg: "Duplicate"},
		"8 fingerprints": {mutate: func(c *rotation.TrustConsumer) { c.Status.Holds[0].Fingerprints = fps(8) }},
		"9 fingerprints": {mutate: func(c *rotation.TrustConsumer) { c.Status.Holds[0].Fingerprints = fps(9) }, wantField: "status.holds[0].fingerprints", wantMsg: "8"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := trustConsumer()
			tc.mutate(c)
			errs := ValidateTrustConsumer(c)
			if tc.wantField == "" && len(errs) != 0 {
				t.Fatalf("refused: %v", errs)
			}
			if tc.wantField != "" && !hasError(errs, tc.wantField, tc.wantMsg) {
				t.Fatalf("want an error on %s saying %q, got %v", tc.wantField, tc.wantMsg, errs)
			}
			if !strings.HasPrefix(tc.wantField, "status") {
				return
			}
			// A report is checked the same way against the stored spec.
			old := trustConsumer()
			c.ResourceVersion, old.ResourceVersion = "1", "1"
			if errs := ValidateTrustConsumerStatusUpdate(c, old); !hasError(errs, tc.wantField, tc.wantMsg) {
				t.Fatalf("status update: want an error on %s, got %v", tc.wantField, errs)
			}
		})
	}
}

func TestValidateTrustConsumerUpdate(t *testing.T) {
	old := trustConsumer()
	old.ResourceVersion = "1"
	updated := old.DeepCopy()
	updated.Spec.CertificateAuthorities = append(updated.Spec.CertificateAuthorities, "b")
	if errs := ValidateTrustConsumerUpdate(updated, old); len(errs) != 0 {
		t.Fatalf("adding a CA refused: %v", errs)
	}
	updated.Spec.Reporter = "mallory"
	if errs := ValidateTrustConsumerUpdate(updated, old); !hasError(errs, "spec.reporter", "immutable") {
		t.Fatalf("changing the reporter accepted: %v", errs)
	}
}

func manyNames(n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("ca-%d", i))
	}
	return out
}

func fps(n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fp(100+i))
	}
	return out
}
