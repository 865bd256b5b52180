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
	csr, err := client.CertificatesV1alpha1().CertificateSigningRequests().Create(context.Background(), &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request:    fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:node:dev-1", Organizations: []string{"system:nodes"}}),
			SignerName: signer,
			Usages:     []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

// TestInsecureTestSignerOnlyWithItsFlag: with --enable-insecure-test-signer
// the rekey.io/insecure-test signer exists and approves and signs a node
// request in its create, saying that nothing was verified; without the
// flag there is no such signer and the same request stays pending.
func TestInsecureTestSignerOnlyWithItsFlag(t *testing.T) {
	ctx := context.Background()
	on := framework.StartStandalone(t, t.TempDir(), "--enable-insecure-test-signer")
	var issued *certv1alpha1.CertificateSigningRequest
	for i := 0; ; i++ {
		// The built-in Signer reaches the issuer's cache a moment after
		// start; until then requests stay pending.
		issued = nodeRequest(t, on.Client, fmt.Sprintf("dev-%d", i), insecureTestSigner)
		if len(issued.Status.Certificate) > 0 {
			break
		}
		if i == 100 {
			t.Fatalf("never issued at create: %+v", issued.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
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
	for i := 0; ; i++ {
		_, err := off.Client.CertificatesV1alpha1().Signers().Get(ctx, "rekey.io:kubelet-serving-tpm", metav1.GetOptions{})
		if err == nil {
			break
		}
		if i == 100 {
			t.Fatal("no built-in signers")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := off.Client.CertificatesV1alpha1().Signers().Get(ctx, "rekey.io:insecure-test", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the insecure test signer without its flag: %v", err)
	}
	if pending := nodeRequest(t, off.Client, "dev-off", insecureTestSigner); len(pending.Status.Conditions) > 0 || len(pending.Status.Certificate) > 0 {
		t.Fatalf("decided without the flag: %+v", pending.Status)
	}
}
