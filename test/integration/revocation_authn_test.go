package integration

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

// TestStandaloneRefusesRevokedCertificate: a standalone server's own
// authentication refuses a certificate once it is revoked (401), whichever
// of its authenticators verified it (here a node client certificate of
// rekey's kubelet client CA, which standalone mode trusts), while another
// certificate of the same node keeps authenticating; and the revocation
// webhook, unauthenticated, answers Deny for it.
func TestStandaloneRefusesRevokedCertificate(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	node, _ := srv.ClientFor(t, "system:node:revoked-node", "system:nodes")
	requests := node.CertificatesV1alpha1().CertificateSigningRequests()
	type pair struct {
		cfg *rest.Config
		sum string
	}
	issue := func(name string) pair {
		key := fixtures.NewKey(t)
		csr := &certv1alpha1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certv1alpha1.CertificateSigningRequestSpec{
				Request:    fixtures.CSRPEMWithKey(t, key, fixtures.CSROptions{CommonName: "system:node:revoked-node", Organizations: []string{"system:nodes"}}),
				SignerName: "rekey.io/kube-apiserver-client-kubelet",
				Usages:     nodeClientUsages,
			},
		}
		var certPEM []byte
		// A fresh server loads its Signers and CA keys a moment after it
		// starts.
		framework.Eventually(t, signTimeout, name+" signed through selfnodeclient", func(ctx context.Context) error {
			out, err := requests.CreateSelfNodeClient(ctx, name, csr, metav1.CreateOptions{})
			if err != nil {
				_ = srv.Client.CertificatesV1alpha1().CertificateSigningRequests().Delete(ctx, name, metav1.DeleteOptions{})
				return err
			}
			if certPEM = out.Status.Certificate; len(certPEM) == 0 {
				_ = srv.Client.CertificatesV1alpha1().CertificateSigningRequests().Delete(ctx, name, metav1.DeleteOptions{})
				return fmt.Errorf("no certificate yet: %+v", out.Status.Conditions)
			}
			return nil
		})
		certs, err := validation.ParseCertificateChain(certPEM)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		cfg := rest.CopyConfig(srv.Config)
		cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile = "", ""
		cfg.TLSClientConfig.CertData = certPEM
		cfg.TLSClientConfig.KeyData = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
		sum := sha256.Sum256(certs[0].Raw)
		return pair{cfg: cfg, sum: hex.EncodeToString(sum[:])}
	}
	status := func(ctx context.Context, p pair) int {
		var code int
		kubernetes.NewForConfigOrDie(p.cfg).Discovery().RESTClient().Get().AbsPath("/apis/certificates.rekey.io/v1alpha1").Do(ctx).StatusCode(&code)
		return code
	}
	revoked, other := issue("revoked-node-1"), issue("revoked-node-2")
	for _, p := range []pair{revoked, other} {
		if code := status(context.Background(), p); code != http.StatusOK {
			t.Fatalf("a node certificate before any revocation: %d, want 200", code)
		}
	}

	if _, err := srv.Client.CertificatesV1alpha1().Revocations().Create(context.Background(), &certv1alpha1.Revocation{
		Spec: certv1alpha1.RevocationSpec{CertificateSHA256: revoked.sum, Reason: certv1alpha1.RevocationReasonKeyCompromise},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 10*time.Second, "the revoked certificate refused", func(ctx context.Context) error {
		if code := status(ctx, revoked); code != http.StatusUnauthorized {
			return fmt.Errorf("the revoked certificate: %d, want 401", code)
		}
		return nil
	})
	if code := status(context.Background(), other); code != http.StatusOK {
		t.Fatalf("the node's other certificate: %d, want 200", code)
	}

	// The webhook needs no credentials.
	anonymous := rest.AnonymousClientConfig(srv.Config)
	body := fmt.Sprintf(`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"system:node:revoked-node","extra":{"authentication.kubernetes.io/credential-id":["X509SHA256=%s"]}}}`, revoked.sum)
	raw, err := kubernetes.NewForConfigOrDie(anonymous).Discovery().RESTClient().Post().AbsPath("/revocation/authorize").
		SetHeader("Content-Type", "application/json").Body([]byte(body)).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("the webhook without credentials: %v", err)
	}
	if want := `"denied":true`; !strings.Contains(string(raw), want) || !strings.Contains(string(raw), "X509SHA256="+revoked.sum+" was revoked (KeyCompromise)") {
		t.Fatalf("the webhook's answer %s", raw)
	}
}
