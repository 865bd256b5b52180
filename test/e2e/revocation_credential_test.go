package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/controller/credential"
	"rekey.io/rekey/pkg/serveridentity"
	"rekey.io/rekey/pkg/strictpem"
	"rekey.io/rekey/test/framework"
)

// TestClientCertificateRevokedAfterTheGracePeriod: a RotatingCredential's
// previous client certificate works during the grace period and, once it
// ends, is revoked (a Revocation by rekey's controllers, reason
// Superseded): kube-apiserver refuses it, while the current one still
// authenticates.
func TestClientCertificateRevokedAfterTheGracePeriod(t *testing.T) {
	ns := credentialNamespace(t, "rcred-revoke")
	const grace = 10 * time.Second
	rc := newCredential(t, ns, 10*time.Minute, grace, rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterClientCertificate,
		ClientCertificate: &rotationv1alpha1.ClientCertificateMinter{SignerName: "rekey.io/kube-apiserver-client", CommonName: "rcred-revoked", Organizations: []string{"rcred-e2e"}}})
	first := waitSecret(t, ns, "minted", 60*time.Second, func(s *corev1.Secret) bool { return generation(s) == 1 })
	if err := cluster.TrustClientCAs(first.Data["ca.crt"]); err != nil {
		t.Fatal(err)
	}
	reviewWith := func(ctx context.Context, crt, key []byte) error {
		client := kubernetes.NewForConfigOrDie(&rest.Config{Host: cluster.KubeAPIURL,
			TLSClientConfig: rest.TLSClientConfig{CAData: cluster.ServingCA.CertPEM(), CertData: crt, KeyData: key}})
		review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if got := review.Status.UserInfo.Username; got != "rcred-revoked" {
			return framework.Permanent(fmt.Errorf("kube-apiserver sees %q", got))
		}
		return nil
	}
	framework.Eventually(t, 30*time.Second, "generation 1 authenticating", func(ctx context.Context) error {
		return reviewWith(ctx, first.Data["tls.crt"], first.Data["tls.key"])
	})

	ctx := context.Background()
	if _, err := cluster.RekeyAdmin.RotationV1alpha1().RotatingCredentials(ns).Rotate(ctx, rc.Name, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	second := waitSecret(t, ns, "rotated", 60*time.Second, func(s *corev1.Secret) bool { return generation(s) == 2 && len(s.Data["tls.crt.old"]) > 0 })
	// During the grace period both work.
	if err := reviewWith(ctx, second.Data["tls.crt.old"], second.Data["tls.key.old"]); err != nil {
		t.Fatalf("generation 1 during the grace period: %v", err)
	}

	// At its end generation 1 is revoked: refused with the revocation.
	framework.Eventually(t, grace+60*time.Second, "generation 1 refused after the grace period", func(ctx context.Context) error {
		err := reviewWith(ctx, first.Data["tls.crt"], first.Data["tls.key"])
		if err == nil || !strings.Contains(err.Error(), "was revoked (Superseded)") {
			return fmt.Errorf("a request with generation 1: %v", err)
		}
		return nil
	})
	certs, err := strictpem.Certificates(first.Data["tls.crt"], 4)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(certs[0].Raw)
	rev, err := cluster.RekeyAdmin.CertificatesV1alpha1().Revocations().Get(ctx, hex.EncodeToString(sum[:]), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rev.Spec.Reason != certv1alpha1.RevocationReasonSuperseded || rev.Status.RevokedBy != serveridentity.UserName ||
		rev.Status.Request != credential.RequestName(rc, 1) || rev.Annotations[credential.AnnotationRevokedGeneration] != ns+"/cred generation 1" {
		t.Fatalf("revocation %+v", rev)
	}
	framework.Eventually(t, 30*time.Second, "the .old keys removed", func(ctx context.Context) error {
		s, err := cluster.Admin.CoreV1().Secrets(ns).Get(ctx, "cred", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if _, ok := s.Data["tls.crt.old"]; ok {
			return fmt.Errorf("still there")
		}
		return nil
	})
	if err := reviewWith(ctx, second.Data["tls.crt"], second.Data["tls.key"]); err != nil {
		t.Fatalf("generation 2 after generation 1 was revoked: %v", err)
	}
}
