package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

func manifest(t *testing.T, name, signer string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: certificates.rekey.io/v1alpha1
kind: CertificateSigningRequest
metadata:
  name: %s
spec:
  signerName: %s
  usages: ["digital signature", "client auth"]
  username: system:admin
  uid: forged-uid
  groups: ["system:masters"]
  extra:
    scopes: ["everything"]
  request: %s
`, name, signer, base64.StdEncoding.EncodeToString(fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: name}))))
}

func TestIdentityIsTheAuthenticatedUserNotTheBody(t *testing.T) {
	_, kubeconfig := userClient(t, "carol", "devs")
	bind(t, "carol", "rekey:requester")
	framework.Eventually(t, settleTimeout, "carol creating carol-csr with kubectl", func(ctx context.Context) error {
		_, errOut, err := framework.RunKubectl(t, kubeconfig, manifest(t, "carol-csr", "example.com/id"), "create", "-f", "-")
		if err != nil && !strings.Contains(errOut, "AlreadyExists") {
			return fmt.Errorf("%v: %s", err, errOut)
		}
		return nil
	})
	got, err := cluster.RekeyAdmin.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), "carol-csr", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, forged := got.Spec.Extra["scopes"]; got.Spec.Username != "carol" || got.Spec.UID == "forged-uid" || forged {
		t.Fatalf("identity = %q uid=%q extra=%v, want carol from the client certificate", got.Spec.Username, got.Spec.UID, got.Spec.Extra)
	}
	if !slices.Contains(got.Spec.Groups, "devs") || !slices.Contains(got.Spec.Groups, "system:authenticated") || slices.Contains(got.Spec.Groups, "system:masters") {
		t.Fatalf("groups = %v", got.Spec.Groups)
	}
}

func TestImpersonatedRequestIsStampedAsTheImpersonatedUser(t *testing.T) {
	bind(t, "dave", "rekey:requester")
	framework.Eventually(t, settleTimeout, "creating impersonated-csr as dave", func(ctx context.Context) error {
		_, errOut, err := framework.RunKubectl(t, cluster.AdminKubeconfig, manifest(t, "impersonated-csr", "example.com/id"),
			"create", "-f", "-", "--as=dave", "--as-group=impersonated-group")
		if err != nil && !strings.Contains(errOut, "AlreadyExists") {
			return fmt.Errorf("%v: %s", err, errOut)
		}
		return nil
	})
	got, err := cluster.RekeyAdmin.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), "impersonated-csr", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Username != "dave" || !slices.Contains(got.Spec.Groups, "impersonated-group") || slices.Contains(got.Spec.Groups, "system:masters") {
		t.Fatalf("identity = %q %v, want dave in impersonated-group", got.Spec.Username, got.Spec.Groups)
	}
}

func TestKubectlThroughTheAggregator(t *testing.T) {
	kc := cluster.AdminKubeconfig
	if out, errOut, err := framework.RunKubectl(t, kc, manifest(t, "kubectl-agg", "example.com/kubectl"), "create", "-f", "-"); err != nil {
		t.Fatalf("create: %v %s%s", err, out, errOut)
	}
	out, errOut, err := framework.RunKubectl(t, kc, nil, "get", "rcsr", "kubectl-agg")
	if err != nil {
		t.Fatalf("get: %v %s", err, errOut)
	}
	for _, col := range []string{"NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION", "kubectl-agg", "example.com/kubectl", "e2e-admin", "Pending"} {
		if !strings.Contains(out, col) {
			t.Errorf("kubectl get rcsr lacks %q:\n%s", col, out)
		}
	}
	out, errOut, err = framework.RunKubectl(t, kc, nil, "explain", "rcsr.spec.signerName", "--api-version=certificates.rekey.io/v1alpha1")
	if err != nil || !strings.Contains(out, "signerName") {
		t.Fatalf("explain: %v %s%s", err, out, errOut)
	}
	out, errOut, err = framework.RunKubectl(t, kc, nil, "delete", "rcsr", "kubectl-agg")
	if err != nil || !strings.Contains(out, "deleted") {
		t.Fatalf("delete: %v %s%s", err, out, errOut)
	}
}
