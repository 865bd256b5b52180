package e2e

import (
	"context"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/test/framework"
)

func signerObject(signerName, caName string) *certv1alpha1.Signer {
	return &certv1alpha1.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: signerObjectName(signerName)},
		Spec: certv1alpha1.SignerSpec{
			SignerName:              signerName,
			CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: caName},
			Policy: certv1alpha1.SignerPolicy{
				AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth, certv1alpha1.UsageDigitalSignature},
				MaxDuration:   metav1.Duration{Duration: 24 * time.Hour},
			},
			Approval: certv1alpha1.SignerApproval{Mode: certv1alpha1.ApprovalManual},
		},
	}
}

func signerObjectName(signerName string) string {
	for i := range signerName {
		if signerName[i] == '/' {
			return signerName[:i] + ":" + signerName[i+1:]
		}
	}
	return signerName
}

// TestSignerCannotBorrowACA is the escalation through delegated RBAC: a team
// that may create Signers and sign for its own domain points one at the CA
// kube-apiserver trusts for clients. Binding needs "use" on the CA.
func TestSignerCannotBorrowACA(t *testing.T) {
	ctx := context.Background()
	admin := cluster.RekeyAdmin
	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: "team-ca"},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{CommonName: "team CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256,
			Validity: metav1.Duration{Duration: 24 * time.Hour}, KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clusterRole(t, "e2e-signer-owner-team", rbacv1.PolicyRule{
		APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"signers"}, Verbs: []string{"create", "get", "update"},
	}, rbacv1.PolicyRule{
		APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"signers"}, ResourceNames: []string{"team.example.com/*"}, Verbs: []string{"sign", "approve"},
	}, rbacv1.PolicyRule{
		APIGroups: []string{"rotation.rekey.io"}, Resources: []string{"certificateauthorities"}, ResourceNames: []string{"team-ca"}, Verbs: []string{"use", "get"},
	})
	team, _ := userClient(t, "team-lead")
	bind(t, "team-lead", "e2e-signer-owner-team")
	signers := team.CertificatesV1alpha1().Signers()

	// RBAC takes a moment; the permitted binding shows when it has.
	framework.Eventually(t, settleTimeout, "team-lead creating the Signer team.example.com/app", func(ctx context.Context) error {
		_, err := signers.Create(ctx, signerObject("team.example.com/app", "team-ca"), metav1.CreateOptions{})
		return err
	})
	_, err := signers.Create(ctx, signerObject("team.example.com/masters", "rekey.io-kube-apiserver-client"), metav1.CreateOptions{})
	requireForbidden(t, err, `"use"`, `"certificateauthorities"`, `"rekey.io-kube-apiserver-client"`)
	_, err = signers.Create(ctx, signerObject("other.example.com/app", "team-ca"), metav1.CreateOptions{})
	requireForbidden(t, err, `"sign"`, "other.example.com/app")

	// An update is checked again. The signer controller writes the new
	// Signer's status meanwhile, so a read-modify-write may meet a newer
	// resourceVersion: retry on conflict, as any client does.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := signers.Get(ctx, "team.example.com:app", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Policy.MaxDuration = metav1.Duration{Duration: 12 * time.Hour}
		_, err = signers.Update(ctx, s, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("updating the team's own Signer: %v", err)
	}
}
