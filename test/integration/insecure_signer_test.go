package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

const insecureTestSigner = "rekey.io/insecure-test"

// nodeRequest is a node client request for signer, created as the admin.
func nodeRequest(t *testing.T, client clientset.Interface, name, signer string) *certv1alpha1.CertificateSigningRequest {
	t.Helper()
	csr, err := createNodeRequest(context.Background(), t, client, name, signer)
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

func createNodeRequest(ctx context.Context, t *testing.T, client clientset.Interface, name, signer string) (*certv1alpha1.CertificateSigningRequest, error) {
	return client.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request:    fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:node:dev-1", Organizations: []string{"system:nodes"}}),
			SignerName: signer,
			Usages:     []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
}

// TestInsecureTestSignerOnlyWithItsFlag: with --enable-insecure-test-signer
// the rekey.io/insecure-test signer exists and approves and signs a node
// request in its create, saying that nothing was verified; without the
// flag there is no such signer and the same request stays pending.
func TestInsecureTestSignerOnlyWithItsFlag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	on := framework.StartStandalone(t, t.TempDir(), "--enable-insecure-test-signer")
	var issued *certv1alpha1.CertificateSigningRequest
	i := 0
	// The built-in Signer reaches the issuer's cache a moment after start;
	// until then requests stay pending.
	framework.Eventually(t, 30*time.Second, "a request issued at create", func(ctx context.Context) error {
		var err error
		if issued, err = createNodeRequest(ctx, t, on.Client, fmt.Sprintf("dev-%d", i), insecureTestSigner); err != nil {
			return framework.Permanent(err)
		}
		i++
		if len(issued.Status.Certificate) == 0 {
			return fmt.Errorf("pending: %s", statusOf(issued))
		}
		return nil
	})
	var attested *certv1alpha1.CertificateSigningRequestCondition
	for i := range issued.Status.Conditions {
		if issued.Status.Conditions[i].Type == certv1alpha1.CertificateAttested {
			attested = &issued.Status.Conditions[i]
		}
	}
	if attested == nil || attested.Status != metav1.ConditionTrue || attested.Reason != "InsecureTest" || !hasCondition(issued, certv1alpha1.CertificateApproved) {
		t.Fatalf("conditions %+v", issued.Status.Conditions)
	}

	off := framework.StartStandalone(t, t.TempDir())
	// Once the built-ins are there, the insecure one is not among them.
	framework.Eventually(t, 30*time.Second, "the built-in signers", func(ctx context.Context) error {
		_, err := off.Client.CertificatesV1alpha1().Signers().Get(ctx, "rekey.io:kubelet-serving-tpm", metav1.GetOptions{})
		return err
	})
	if _, err := off.Client.CertificatesV1alpha1().Signers().Get(ctx, "rekey.io:insecure-test", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the insecure test signer without its flag: %v", err)
	}
	if pending := nodeRequest(t, off.Client, "dev-off", insecureTestSigner); len(pending.Status.Conditions) > 0 || len(pending.Status.Certificate) > 0 {
		t.Fatalf("decided without the flag: %+v", pending.Status)
	}
}
