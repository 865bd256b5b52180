package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/test/framework"
)

const (
	clientSigner  = "rekey.io/kube-apiserver-client"
	servingSigner = "rekey.io/kubelet-serving"
)

func TestApproverRoleIsScopedToItsSigner(t *testing.T) {
	admin := cluster.RekeyAdmin
	create(t, admin, csrFor(t, "approve-client", clientSigner))
	create(t, admin, csrFor(t, "approve-serving", servingSigner))

	approver, _ := userClient(t, "approver-client")
	bind(t, "approver-client", "rekey:approver:rekey.io:kube-apiserver-client")
	framework.Eventually(t, settleTimeout, "approving approve-client as approver-client", func(context.Context) error { return approve(t, approver, "approve-client") })
	if !isApproved(t, "approve-client") {
		t.Fatal("approval did not take effect")
	}
	err := approve(t, approver, "approve-serving")
	requireForbidden(t, err, `"approve"`, `"signers"`, servingSigner, "rekey.io/*")
	if isApproved(t, "approve-serving") {
		t.Fatal("approved without permission")
	}
}

func TestApproverDomainWildcard(t *testing.T) {
	admin := cluster.RekeyAdmin
	for _, n := range []string{"wild-one", "wild-two"} {
		create(t, admin, csrFor(t, n, "example.com/"+n))
	}
	create(t, admin, csrFor(t, "wild-other", "other.org/signer"))

	approver, _ := userClient(t, "approver-example")
	bind(t, "approver-example", "rekey:approver:example.com:all")
	framework.Eventually(t, settleTimeout, "approving wild-one as approver-example", func(context.Context) error { return approve(t, approver, "wild-one") })
	if err := approve(t, approver, "wild-two"); err != nil {
		t.Fatalf("example.com/* should approve example.com/wild-two: %v", err)
	}
	requireForbidden(t, approve(t, approver, "wild-other"), `"approve"`, "other.org/signer", "other.org/*")
}

// Signing for a signer needs "sign" on it. Custom signer names are used
// here: rekey's own controllers sign for the built-in ones as soon as a
// request is approved.
func TestSignerRoleIsScopedToItsSigner(t *testing.T) {
	admin := cluster.RekeyAdmin
	for name, signer := range map[string]string{
		"sign-exact": "example.org/exact", "sign-exact-other": "example.org/other",
		"sign-ex-one": "example.com/one", "sign-ex-two": "example.com/two", "sign-other": "other.org/x",
		"sign-approver-only": "example.org/exact",
	} {
		create(t, admin, csrFor(t, name, signer))
		if err := approve(t, admin, name); err != nil {
			t.Fatalf("admin approving %s: %v", name, err)
		}
	}
	clusterRole(t, "e2e-signer-example.org-exact", rbacv1.PolicyRule{
		APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"get", "list", "watch"},
	}, rbacv1.PolicyRule{
		APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"certificatesigningrequests/status"}, Verbs: []string{"update", "patch"},
	}, rbacv1.PolicyRule{
		APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"signers"}, ResourceNames: []string{"example.org/exact"}, Verbs: []string{"sign"},
	})

	signer, _ := userClient(t, "signer-exact")
	bind(t, "signer-exact", "e2e-signer-example.org-exact")
	framework.Eventually(t, settleTimeout, "signing sign-exact as signer-exact", func(context.Context) error { return setCertificate(t, signer, "sign-exact") })
	requireForbidden(t, setCertificate(t, signer, "sign-exact-other"), `"sign"`, `"signers"`, "example.org/other")

	domainSigner, _ := userClient(t, "signer-example")
	bind(t, "signer-example", "rekey:signer:example.com:all")
	framework.Eventually(t, settleTimeout, "signing sign-ex-one as signer-example", func(context.Context) error { return setCertificate(t, domainSigner, "sign-ex-one") })
	if err := setCertificate(t, domainSigner, "sign-ex-two"); err != nil {
		t.Fatalf("example.com/* should sign example.com/two: %v", err)
	}
	requireForbidden(t, setCertificate(t, domainSigner, "sign-other"), `"sign"`, "other.org/x")

	// Approving for a signer does not allow signing for it.
	clusterRole(t, "e2e-approver-example.org-exact", rbacv1.PolicyRule{
		APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"get", "list", "watch"},
	}, rbacv1.PolicyRule{
		APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"certificatesigningrequests/approval", "certificatesigningrequests/status"}, Verbs: []string{"update", "patch"},
	}, rbacv1.PolicyRule{
		APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"signers"}, ResourceNames: []string{"example.org/exact"}, Verbs: []string{"approve"},
	})
	approverOnly, _ := userClient(t, "approver-only")
	bind(t, "approver-only", "e2e-approver-example.org-exact")
	framework.Eventually(t, settleTimeout, "approver-only reading sign-approver-only", func(ctx context.Context) error {
		_, err := approverOnly.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), "sign-approver-only", metav1.GetOptions{})
		return err
	})
	requireForbidden(t, setCertificate(t, approverOnly, "sign-approver-only"), `"sign"`, "example.org/exact")
}

// A requester with every RBAC verb on the resource and both subresources,
// but no approve or sign on any signer, tries every route to approving its
// own request.
func TestRequesterCannotApproveItsOwnRequestByAnyRoute(t *testing.T) {
	clusterRole(t, "e2e-csr-everything", rbacv1.PolicyRule{
		APIGroups: []string{"certificates.rekey.io"},
		Resources: []string{"certificatesigningrequests", "certificatesigningrequests/status", "certificatesigningrequests/approval"},
		Verbs:     []string{"create", "get", "list", "watch", "update", "patch"},
	})
	sneaky, kubeconfig := userClient(t, "sneaky")
	bind(t, "sneaky", "e2e-csr-everything")
	csrs := sneaky.CertificatesV1alpha1().CertificateSigningRequests()
	mine := create(t, sneaky, csrFor(t, "sneaky-own", "example.com/self"))
	ctx := context.Background()

	// 1. /approval: refused by SignerApproval.
	_, err := csrs.UpdateApproval(ctx, mine.Name, withCondition(mine, certv1alpha1.CertificateApproved), metav1.UpdateOptions{})
	requireForbidden(t, err, `"approve"`, "example.com/self")

	// 2. /status: Approved can only be added through /approval.
	if _, err := csrs.UpdateStatus(ctx, withCondition(mine, certv1alpha1.CertificateApproved), metav1.UpdateOptions{}); err == nil {
		t.Error("/status accepted an Approved condition")
	}

	// 3. Main resource update: status is not writable there.
	if _, err := csrs.Update(ctx, withCondition(mine, certv1alpha1.CertificateApproved), metav1.UpdateOptions{}); err != nil {
		t.Errorf("main resource update failed outright: %v", err)
	}

	// 4. Merge patch of the main resource.
	patch := []byte(`{"status":{"conditions":[{"type":"Approved","status":"True","reason":"Patched"}]}}`)
	if _, err := csrs.Patch(ctx, mine.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("main resource patch failed outright: %v", err)
	}

	// 5. Server-side apply of the main resource and of /approval.
	applied, _ := json.Marshal(map[string]any{
		"apiVersion": "certificates.rekey.io/v1alpha1", "kind": "CertificateSigningRequest",
		"metadata": map[string]any{"name": mine.Name},
		"status":   map[string]any{"conditions": []any{map[string]any{"type": "Approved", "status": "True", "reason": "Applied"}}},
	})
	if _, err := csrs.Patch(ctx, mine.Name, types.ApplyPatchType, applied, metav1.PatchOptions{FieldManager: "sneaky", Force: ptrTrue()}); err != nil {
		t.Errorf("main resource apply failed outright: %v", err)
	}
	_, err = csrs.Patch(ctx, mine.Name, types.ApplyPatchType, applied, metav1.PatchOptions{FieldManager: "sneaky", Force: ptrTrue()}, "approval")
	requireForbidden(t, err, `"approve"`)

	// 6. The same through kubectl.
	_, errOut, err := framework.RunKubectl(t, kubeconfig, nil, "patch", "rcsr", mine.Name, "--subresource=approval", "--type=merge", "-p", string(patch))
	if err == nil {
		t.Error("kubectl patch --subresource=approval succeeded")
	} else if !strings.Contains(errOut, "approve") {
		t.Errorf("kubectl patch error does not name the approve verb: %s", errOut)
	}

	if isApproved(t, mine.Name) {
		t.Fatal("the requester approved its own request")
	}
}

func ptrTrue() *bool { b := true; return &b }
