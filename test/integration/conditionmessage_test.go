package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/agent"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

// TestHugeSubjectLeavesRequestDecidable: a request whose subject carries a
// 20,000-character attribute (two bytes each in UTF-8) gets conditions
// rekey wrote at create (Attested, for a TPM signer) or at approval
// (Failed, the signer's policy refusing the subject) that validation
// accepts, so a person's later decision on it is stored: an admin's Deny
// of the pending TPM request, and a write of the failed one's approval.
func TestHugeSubjectLeavesRequestDecidable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := framework.StartStandalone(t, t.TempDir())
	csrs := srv.Client.CertificatesV1alpha1().CertificateSigningRequests()
	huge := strings.Repeat("é", 20000)
	requireCapped := func(csr *certv1alpha1.CertificateSigningRequest) {
		t.Helper()
		for _, c := range csr.Status.Conditions {
			if len(c.Message) > validation.MaxConditionMessageLength {
				t.Fatalf("%s: condition %s has a message of %d bytes", csr.Name, c.Type, len(c.Message))
			}
		}
	}

	// A fresh server decides at create once its TPM Signer has reached the
	// issuer's cache; until then a create is stored undecided. Wait with
	// probes (an ordinary subject, no evidence: Attested=False) until a
	// create is decided.
	probe := 0
	framework.Eventually(t, 30*time.Second, "a TPM request decided at create", func(ctx context.Context) error {
		probe++
		created, err := csrs.Create(ctx, &certv1alpha1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("tpm-probe-%d", probe)},
			Spec: certv1alpha1.CertificateSigningRequestSpec{Request: fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:node:probe", Organizations: []string{"system:nodes"}}),
				SignerName: "rekey.io/kube-apiserver-client-kubelet-tpm", Usages: agent.ClientTemplate("x", "x").Usages},
		}, metav1.CreateOptions{})
		if err != nil {
			return framework.Permanent(err)
		}
		if certv1alpha1.GetCondition(created, certv1alpha1.CertificateAttested) == nil {
			return fmt.Errorf("undecided: %s", statusOf(created))
		}
		return nil
	})

	for name, cn := range map[string]string{"tpm-huge-cn": huge, "tpm-huge-node": "system:node:" + huge} {
		created, err := csrs.Create(ctx, &certv1alpha1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certv1alpha1.CertificateSigningRequestSpec{Request: fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: cn, Organizations: []string{"system:nodes"}}),
				SignerName: "rekey.io/kube-apiserver-client-kubelet-tpm", Usages: agent.ClientTemplate("x", "x").Usages},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := certv1alpha1.GetCondition(created, certv1alpha1.CertificateAttested); c == nil || c.Status != metav1.ConditionFalse {
			t.Fatalf("%s: want Attested=False, got %+v", name, created.Status.Conditions)
		}
		requireCapped(created)
		deny := created.DeepCopy()
		deny.Status.Conditions = append(deny.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
			Type: certv1alpha1.CertificateDenied, Status: metav1.ConditionTrue, Reason: "AdminDenied", Message: "not a node of ours"})
		if _, err := csrs.UpdateApproval(ctx, name, deny, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("%s: the admin's Deny: %v", name, err)
		}
	}

	// Approved by the admin, then refused by the signer's policy (the
	// common name lacks system:node:, and the refusal quotes it): Failed.
	created, err := csrs.Create(ctx, &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "policy-huge"},
		Spec: certv1alpha1.CertificateSigningRequestSpec{Request: fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: huge, Organizations: []string{"system:nodes"}}),
			SignerName: "rekey.io/kube-apiserver-client-kubelet-tpm", Usages: agent.ClientTemplate("x", "x").Usages},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	approve := created.DeepCopy()
	approve.Status.Conditions = append(approve.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
		Type: certv1alpha1.CertificateApproved, Status: metav1.ConditionTrue, Reason: "AdminApproved", Message: "looks fine"})
	approved, err := csrs.UpdateApproval(ctx, "policy-huge", approve, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if certv1alpha1.GetCondition(approved, certv1alpha1.CertificateFailed) == nil {
		t.Fatalf("the policy did not refuse the subject: %+v", approved.Status.Conditions)
	}
	requireCapped(approved)
	if _, err := csrs.UpdateApproval(ctx, "policy-huge", approved, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("a later write of the failed request: %v", err)
	}
}
