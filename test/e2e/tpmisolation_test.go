package e2e

import (
	"context"
	"crypto/rand"
	"encoding/pem"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/agent"
	"rekey.io/rekey/pkg/agent/tpmnode"
	attv1alpha1 "rekey.io/rekey/pkg/apis/attestation/v1alpha1"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/attest"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

// TestTPMAttestationIsTheNodesAlone: through kube-apiserver and the
// install's RBAC, with node n1's challenge outstanding, a user with only
// the requester role and another node (n2) each send a request for n1 with
// junk evidence: neither spends n1's challenge nor changes n1's
// NodeAttestation, and n1's genuine answer is then approved and signed in
// its create. n2 may not replace n1's NodeAttestation spec, ask for its
// challenge, or delete it (Forbidden).
func TestTPMAttestationIsTheNodesAlone(t *testing.T) {
	ctx := context.Background()
	tpm := framework.StartSWTPM(t)
	root, intermediate := framework.SWTPMRoots(t)
	tpmPolicy(t, "e2e-tpm-isolation", root, intermediate, readPCRs(t, tpm))
	const n1, n2 = "tpm-iso-n1", "tpm-iso-n2"
	n1Client, _ := userClient(t, "system:node:"+n1, "system:nodes")
	n2Client, _ := userClient(t, "system:node:"+n2, "system:nodes")
	bind(t, "e2e-tpm-requester", "rekey:requester")
	requester, _ := userClient(t, "e2e-tpm-requester")

	// n1 asks for its challenge and makes its answer, but does not send it yet.
	attestor := &agent.TPMAttestor{Open: func() (*tpmnode.Device, error) { return tpmnode.Open(tpm) }, Node: n1, Policy: "e2e-tpm-isolation", Dir: t.TempDir()}
	var genuine *certv1alpha1.CertificateSigningRequest
	framework.Eventually(t, settleTimeout, "n1's attested request", func(ctx context.Context) error {
		var err error
		genuine, err = attestedCSR(t, n1Client, attestor, n1)
		return err
	})
	before, err := cluster.RekeyAdmin.AttestationV1alpha1().NodeAttestations().Get(ctx, n1, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if before.Status.Challenge == nil {
		t.Fatalf("n1 has no outstanding challenge: %+v", before.Status)
	}

	// Junk evidence for n1: a request of n1's subject with a random secret.
	junk := func(name string) *certv1alpha1.CertificateSigningRequest {
		csrPEM, err := agent.ClientTemplate(tpmClientSigner, n1).CSR(fixtures.NewKey(t))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(csrPEM)
		secret := make([]byte, attest.SecretSize)
		_, _ = rand.Read(secret)
		request, err := attest.EncodeRequest(block.Bytes, &attest.EvidenceV1{Version: attest.EvidenceVersionV1, Secret: secret,
			Quote: []byte("junk"), Signature: []byte("junk"), PCRBank: "sha256", PCRs: map[string][]byte{"0": make([]byte, 32), "7": make([]byte, 32)}})
		if err != nil {
			t.Fatal(err)
		}
		return &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certv1alpha1.CertificateSigningRequestSpec{Request: request, SignerName: tpmClientSigner, Usages: genuine.Spec.Usages}}
	}
	for _, from := range []struct {
		name   string
		client clientset.Interface
	}{{"requester", requester}, {"n2", n2Client}} {
		got := create(t, from.client, junk("tpm-iso-junk-from-"+from.name))
		if c := certv1alpha1.GetCondition(got, certv1alpha1.CertificateAttested); c == nil || c.Status != metav1.ConditionFalse || len(got.Status.Certificate) > 0 {
			t.Fatalf("junk evidence from %s: %+v", from.name, got.Status)
		}
	}
	after, err := cluster.RekeyAdmin.AttestationV1alpha1().NodeAttestations().Get(ctx, n1, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Fatalf("junk evidence from others changed n1's NodeAttestation (-before +after):\n%s", diff)
	}

	// n2 may not touch n1's NodeAttestation in any way.
	replaced := after.DeepCopy()
	replaced.Spec.PolicyName = "e2e-tpm-elsewhere"
	_, err = n2Client.AttestationV1alpha1().NodeAttestations().Update(ctx, replaced, metav1.UpdateOptions{})
	requireForbidden(t, err, n2, n1)
	_, err = n2Client.AttestationV1alpha1().NodeAttestations().Challenge(ctx, n1, &attv1alpha1.ChallengeRequest{}, metav1.CreateOptions{})
	requireForbidden(t, err, n2, n1)
	err = n2Client.AttestationV1alpha1().NodeAttestations().Delete(ctx, n1, metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("node n2 deleting n1's NodeAttestation: %v", err)
	}

	// n1's genuine answer still holds.
	issued, err := n1Client.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, genuine, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := certv1alpha1.GetCondition(issued, certv1alpha1.CertificateAttested); c == nil || c.Status != metav1.ConditionTrue || len(issued.Status.Certificate) == 0 {
		t.Fatalf("n1's genuine answer after the junk: %+v", issued.Status)
	}
	na, err := cluster.RekeyAdmin.AttestationV1alpha1().NodeAttestations().Get(ctx, n1, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if na.Status.Phase != attv1alpha1.NodeAttestationAttested || na.Status.LastAttested == nil || na.Status.LastAttested.Request != issued.Name {
		t.Fatalf("n1's NodeAttestation after its genuine answer: %+v", na.Status)
	}
}
