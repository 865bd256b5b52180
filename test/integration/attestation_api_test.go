package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	attv1alpha1 "rekey.io/rekey/pkg/apis/attestation/v1alpha1"
	"rekey.io/rekey/test/framework"
)

// TestAttestationAPI: attestation.rekey.io is served with defaults,
// validation that names the field, kubectl columns and the rekey category;
// a NodeAttestation takes the EK and AK a real TPM (swtpm) gives and
// refuses areas that are not an EK or a restricted AK; its status is
// rekey's alone.
func TestAttestationAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := framework.StartStandalone(t, t.TempDir())
	root, _ := framework.SWTPMRoots(t)
	policy := fmt.Sprintf(`apiVersion: attestation.rekey.io/v1alpha1
kind: AttestationPolicy
metadata:
  name: swtpm
spec:
  ekRootCertificates: |
%s
  signerNames: [rekey.io/kube-apiserver-client-kubelet-tpm]
  pcrPolicy:
    selection: [0, 7]
`, indent(string(root), "    "))
	if out, errOut, err := framework.RunKubectl(t, srv.Kubeconfig, []byte(policy), "create", "-f", "-"); err != nil {
		t.Fatalf("kubectl create policy: %v\n%s%s", err, out, errOut)
	}
	got, err := srv.Client.AttestationV1alpha1().AttestationPolicies().Get(ctx, "swtpm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.PCRPolicy.Mode != attv1alpha1.PCRModeTrustOnFirstUse || got.Spec.PCRPolicy.Bank != "sha256" ||
		got.Spec.ChallengeLifetime.Duration.String() != "5m0s" || *got.Spec.MaxAttemptsPerEKPerHour != 10 {
		t.Fatalf("defaults not applied: %+v", got.Spec)
	}
	out, _, err := framework.RunKubectl(t, srv.Kubeconfig, nil, "get", "rattpolicy")
	if err != nil || !strings.Contains(out, "rekey.io/kube-apiserver-client-kubelet-tpm") || !strings.Contains(out, "0,7") || !strings.Contains(out, "TrustOnFirstUse") {
		t.Fatalf("kubectl get rattpolicy:\n%s %v", out, err)
	}

	for name, tc := range map[string]struct {
		mutate func(*attv1alpha1.AttestationPolicy)
		field  string
	}{
		"no EK trust":         {func(p *attv1alpha1.AttestationPolicy) { p.Spec.EKRootCertificates = "" }, "spec.ekRootCertificates"},
		"PCR 24":              {func(p *attv1alpha1.AttestationPolicy) { p.Spec.PCRPolicy.Selection = []int32{24} }, "spec.pcrPolicy.selection[0]"},
		"fixed without value": {func(p *attv1alpha1.AttestationPolicy) { p.Spec.PCRPolicy.Mode = attv1alpha1.PCRModeFixed }, "spec.pcrPolicy.values"},
		"upper-case hash": {func(p *attv1alpha1.AttestationPolicy) {
			p.Spec.AllowedEKPublicKeyHashes = []string{strings.Repeat("AB", 32)}
		}, "spec.allowedEKPublicKeyHashes[0]"},
		"not a root": {func(p *attv1alpha1.AttestationPolicy) { p.Spec.EKRootCertificates = "garbage" }, "spec.ekRootCertificates"},
	} {
		t.Run(name, func(t *testing.T) {
			p := got.DeepCopy()
			p.ObjectMeta = metav1.ObjectMeta{Name: "bad-" + strings.ReplaceAll(name, " ", "-")}
			tc.mutate(p)
			_, err := srv.Client.AttestationV1alpha1().AttestationPolicies().Create(ctx, p, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %v, want a 422 naming %s", err, tc.field)
			}
		})
	}

	// The node's areas, from a real TPM.
	dev := framework.OpenSWTPM(t)
	certDER, err := dev.EKCertificate()
	if err != nil {
		t.Fatal(err)
	}
	ek, err := dev.EK()
	if err != nil {
		t.Fatal(err)
	}
	dev.Flush(ek.Handle)
	ak, err := dev.CreateAK()
	if err != nil {
		t.Fatal(err)
	}
	dev.Flush(ak.Handle)
	na := &attv1alpha1.NodeAttestation{ObjectMeta: metav1.ObjectMeta{Name: "tpm-node"},
		Spec: attv1alpha1.NodeAttestationSpec{PolicyName: "swtpm", EKCertificate: certDER, EKPublic: ek.Public, AKPublic: ak.Public},
		// Ignored: status is rekey's.
		Status: attv1alpha1.NodeAttestationStatus{Phase: attv1alpha1.NodeAttestationAttested, BoundNode: "tpm-node"}}
	created, err := srv.Client.AttestationV1alpha1().NodeAttestations().Create(ctx, na, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Status.Phase != "" || created.Status.BoundNode != "" {
		t.Fatalf("a client set status at create: %+v", created.Status)
	}
	for name, tc := range map[string]struct {
		spec  attv1alpha1.NodeAttestationSpec
		field string
	}{
		"AK that is the EK": {attv1alpha1.NodeAttestationSpec{PolicyName: "swtpm", EKPublic: ek.Public, AKPublic: ek.Public}, "spec.akPublic"},
		"EK that is the AK": {attv1alpha1.NodeAttestationSpec{PolicyName: "swtpm", EKPublic: ak.Public, AKPublic: ak.Public}, "spec.ekPublic"},
		"no policy":         {attv1alpha1.NodeAttestationSpec{EKPublic: ek.Public, AKPublic: ak.Public}, "spec.policyName"},
		"truncated EK cert": {attv1alpha1.NodeAttestationSpec{PolicyName: "swtpm", EKCertificate: certDER[:100], EKPublic: ek.Public, AKPublic: ak.Public}, "spec.ekCertificate"},
	} {
		t.Run(name, func(t *testing.T) {
			n := &attv1alpha1.NodeAttestation{ObjectMeta: metav1.ObjectMeta{Name: "bad-" + strings.ReplaceAll(strings.ToLower(name), " ", "-")}, Spec: tc.spec}
			_, err := srv.Client.AttestationV1alpha1().NodeAttestations().Create(ctx, n, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %v, want a 422 naming %s", err, tc.field)
			}
		})
	}
	// Not even system:masters writes status.
	created.Status.Phase = attv1alpha1.NodeAttestationAttested
	if _, err := srv.Client.AttestationV1alpha1().NodeAttestations().UpdateStatus(ctx, created, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("status written by a client: %v", err)
	}
	out, _, err = framework.RunKubectl(t, srv.Kubeconfig, nil, "get", "rekey", "-o", "name")
	if err != nil || !strings.Contains(out, "attestationpolicy.attestation.rekey.io/swtpm") || !strings.Contains(out, "nodeattestation.attestation.rekey.io/tpm-node") {
		t.Fatalf("kubectl get rekey:\n%s %v", out, err)
	}
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n")
}
