package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/agent"
	"rekey.io/rekey/pkg/agent/tpmnode"
	attv1alpha1 "rekey.io/rekey/pkg/apis/attestation/v1alpha1"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

const (
	tpmClientSigner = "rekey.io/kube-apiserver-client-kubelet-tpm"
	tpmClientCA     = "rekey.io-kube-apiserver-client-kubelet-tpm"
)

// tpmPolicy creates an AttestationPolicy gating the TPM client signer:
// EK certificates under roots, PCRs 0 and 7 fixed to values.
func tpmPolicy(t *testing.T, name string, root, intermediate []byte, values map[int][]byte) {
	t.Helper()
	spec := attv1alpha1.AttestationPolicySpec{
		EKRootCertificates: string(root), EKIntermediateCertificates: string(intermediate),
		PCRPolicy:   attv1alpha1.PCRPolicy{Mode: attv1alpha1.PCRModeFixed, Selection: []int32{0, 7}},
		SignerNames: []string{tpmClientSigner, "rekey.io/kubelet-serving-tpm"},
	}
	for _, i := range []int{0, 7} {
		spec.PCRPolicy.Values = append(spec.PCRPolicy.Values, attv1alpha1.PCRValue{Index: int32(i), Value: hex.EncodeToString(values[i])})
	}
	_, err := cluster.RekeyAdmin.AttestationV1alpha1().AttestationPolicies().Create(context.Background(),
		&attv1alpha1.AttestationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.RekeyAdmin.AttestationV1alpha1().AttestationPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

func readPCRs(t *testing.T, addr string) map[int][]byte {
	t.Helper()
	dev, err := tpmnode.Open(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = dev.Close() }()
	values, err := dev.ReadPCRs([]int{0, 7})
	if err != nil {
		t.Fatal(err)
	}
	return values
}

// attestedCSR is a node client request for node with a new key, its
// spec.request carrying evidence made by attestor (the node side, as
// rekey-agent makes it).
func attestedCSR(t *testing.T, client clientset.Interface, attestor *agent.TPMAttestor, node string) (*certv1alpha1.CertificateSigningRequest, error) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := agent.ClientTemplate(tpmClientSigner, node)
	csrPEM, err := tmpl.CSR(key)
	if err != nil {
		t.Fatal(err)
	}
	request, err := attestor.Request(context.Background(), client, csrPEM, key.Public())
	if err != nil {
		return nil, err
	}
	return &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "tpm-" + node + "-"},
		Spec:       certv1alpha1.CertificateSigningRequestSpec{Request: request, SignerName: tpmClientSigner, Usages: tmpl.Usages},
	}, nil
}

// requireRefusedAtCreate: the create stores the request unapproved, with
// no certificate and an Attested=False condition of the reason.
func requireRefusedAtCreate(t *testing.T, what string, got *certv1alpha1.CertificateSigningRequest, reason string) {
	t.Helper()
	c := certv1alpha1.GetCondition(got, certv1alpha1.CertificateAttested)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != reason || len(got.Status.Certificate) > 0 || certv1alpha1.GetCondition(got, certv1alpha1.CertificateApproved) != nil {
		t.Fatalf("%s: want Attested=False %s and nothing issued, got %+v", what, reason, got.Status)
	}
}

// TestTPMNodeAttestation: through the real kube-apiserver and the
// aggregator, a node with an emulated TPM whose EK certificate chains to
// the policy's root bootstraps with a credential that gets nothing
// approved by itself: its request is approved and signed in its create
// (the create response has the certificate), and rekey-agent does the same
// end to end, writing a kubeconfig kube-apiserver accepts as the node.
// Refused, each with its reason: a replayed request, evidence copied to
// another node's request, the EK for another node name, an EK outside the
// policy's roots, and a changed PCR under a fixed policy.
func TestTPMNodeAttestation(t *testing.T) {
	ctx := context.Background()
	// The addresses its serving certificate names, in its Node (read by
	// rekey long before the serving request comes).
	makeNode(t, "tpm-node-a", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.7"},
		corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "tpm-node-a.example.com"})
	tpmA := framework.StartSWTPM(t)
	root, intermediate := framework.SWTPMRoots(t)
	tpmPolicy(t, "e2e-tpm", root, intermediate, readPCRs(t, tpmA))

	bootstrapClient, bootstrap, err := cluster.UserClient("tpm-bootstrap", "rekey:tpm-bootstrappers")
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	attestorA := &agent.TPMAttestor{Open: func() (*tpmnode.Device, error) { return tpmnode.Open(tpmA) }, Node: "tpm-node-a", Policy: "e2e-tpm", Dir: certDir}

	// The bootstrap credential alone: nothing approved, by either signer.
	alone := create(t, bootstrapClient, &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "tpm-no-evidence"},
		Spec: certv1alpha1.CertificateSigningRequestSpec{Request: fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:node:tpm-node-a", Organizations: []string{"system:nodes"}}),
			SignerName: tpmClientSigner, Usages: agent.ClientTemplate(tpmClientSigner, "x").Usages},
	})
	requireRefusedAtCreate(t, "no evidence", alone, "NoChallenge")
	viaNodeClient := csrFor(t, "tpm-bootstrap-nodeclient", "rekey.io/kube-apiserver-client-kubelet")
	viaNodeClient.Spec.Request = fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:node:tpm-node-a", Organizations: []string{"system:nodes"}})
	viaNodeClient.Spec.Usages = agent.ClientTemplate("x", "x").Usages
	if got := create(t, bootstrapClient, viaNodeClient); len(got.Status.Conditions) > 0 || len(got.Status.Certificate) > 0 {
		t.Fatalf("the TPM bootstrap credential got a NodeClient request decided: %+v", got.Status)
	}

	// Approved and signed in the create.
	csr, err := attestedCSR(t, bootstrapClient, attestorA, "tpm-node-a")
	if err != nil {
		t.Fatal(err)
	}
	request := csr.Spec.Request
	issued, err := bootstrapClient.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := certv1alpha1.GetCondition(issued, certv1alpha1.CertificateAttested); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "e2e-tpm") || !strings.Contains(c.Message, "[0 7]") {
		t.Fatalf("Attested condition %+v", c)
	}
	if a := certv1alpha1.GetCondition(issued, certv1alpha1.CertificateApproved); a == nil || a.Reason != "AutoApproved" {
		t.Fatalf("not approved at create: %+v", issued.Status.Conditions)
	}
	if len(issued.Status.Certificate) == 0 {
		t.Fatal("the create response has no certificate")
	}
	ca, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(ctx, tpmClientCA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	verifyChain(t, issued.Status.Certificate, ca.Status.TrustBundle, "system:node:tpm-node-a")
	na, err := cluster.RekeyAdmin.AttestationV1alpha1().NodeAttestations().Get(ctx, "tpm-node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := attestationAt{Phase: attv1alpha1.NodeAttestationAttested, BoundNode: "tpm-node-a", LastRequest: issued.Name, FirstUse: true}
	if diff := cmp.Diff(want, attestationOf(na)); diff != "" {
		t.Fatalf("NodeAttestation status (-want +got):\n%s", diff)
	}

	// The same request again: its challenge is spent.
	replay := csr.DeepCopy()
	replay.Spec.Request = request
	requireRefusedAtCreate(t, "replayed request", create(t, bootstrapClient, replay), "NoChallenge")

	// Evidence for node a, on a request of another key naming node c.
	fresh, err := attestedCSR(t, bootstrapClient, attestorA, "tpm-node-a")
	if err != nil {
		t.Fatal(err)
	}
	blocks := fresh.Spec.Request[bytes.Index(fresh.Spec.Request, []byte("-----BEGIN KUBELET")):]
	other, err := agent.ClientTemplate(tpmClientSigner, "tpm-node-c").CSR(fixtures.NewKey(t))
	if err != nil {
		t.Fatal(err)
	}
	copied := fresh.DeepCopy()
	copied.Spec.Request = append(other, blocks...)
	requireRefusedAtCreate(t, "evidence copied to node c", create(t, bootstrapClient, copied), "NoChallenge")
	// ... and on a request of another key naming node a.
	own, _ := agent.ClientTemplate(tpmClientSigner, "tpm-node-a").CSR(fixtures.NewKey(t))
	copied.Spec.Request = append(own, blocks...)
	requireRefusedAtCreate(t, "evidence copied to another key", create(t, bootstrapClient, copied), "QuoteRefused")

	// The same EK for another node name.
	attestorD := *attestorA
	attestorD.Node = "tpm-node-d"
	if _, err := attestedCSR(t, bootstrapClient, &attestorD, "tpm-node-d"); !isRefusal(err, "EKBoundToAnotherNode") {
		t.Fatalf("the EK of node a for node d: %v", err)
	}

	// rekey-agent, end to end, with no human step.
	nodeKubeconfig := filepath.Join(t.TempDir(), "node.kubeconfig")
	agentBin := framework.Binary(t, "rekey-agent")
	out, err := exec.Command(agentBin, "run", "--once", "--tpm", tpmA, "--attestation-policy", "e2e-tpm", "--node-name", "tpm-node-a",
		"--cert-dir", certDir, "--bootstrap-kubeconfig", bootstrap, "--kubeconfig", nodeKubeconfig, "--issuer-check-interval", "0", "--wait-timeout", "1m").CombinedOutput()
	if err != nil {
		t.Fatalf("rekey-agent run --tpm: %v\n%s", err, out)
	}
	if err := cluster.TrustClientCAs([]byte(ca.Status.TrustBundle)); err != nil {
		t.Fatal(err)
	}
	if got := whoAmI(t, nodeKubeconfig); got != "system:node:tpm-node-a" {
		t.Fatalf("kube-apiserver sees the TPM node as %q", got)
	}
	// Its serving certificate, asked for as the node, attested the same way.
	out, err = exec.Command(agentBin, "run", "--once", "--tpm", tpmA, "--attestation-policy", "e2e-tpm", "--node-name", "tpm-node-a",
		"--cert-dir", certDir, "--bootstrap-kubeconfig", bootstrap, "--kubeconfig", nodeKubeconfig, "--issuer-check-interval", "0", "--wait-timeout", "1m",
		"--serving", "--node-ip", "10.0.0.7", "--node-dns", "tpm-node-a.example.com").CombinedOutput()
	if err != nil {
		t.Fatalf("rekey-agent run --tpm --serving: %v\n%s", err, out)
	}
	serving, err := (&agent.Store{Dir: certDir, Prefix: agent.PrefixServer}).Current()
	if err != nil {
		t.Fatal(err)
	}
	if serving.Leaf.Subject.CommonName != "system:node:tpm-node-a" || len(serving.Leaf.DNSNames) != 1 || serving.Leaf.DNSNames[0] != "tpm-node-a.example.com" {
		t.Fatalf("serving certificate for %v %v", serving.Leaf.Subject, serving.Leaf.DNSNames)
	}

	// Another TPM, with its ECC P-256 EK (certificate at NV 0x01c0000a,
	// from another vendor root).
	tpmB := framework.StartSWTPM(t)
	eccRoot := framework.ProvisionECCEKCertificate(t, tpmB)
	tpmPolicy(t, "e2e-tpm-ecc", eccRoot, nil, readPCRs(t, tpmB))
	attestorE := &agent.TPMAttestor{Open: func() (*tpmnode.Device, error) { return tpmnode.Open(tpmB) }, Node: "tpm-node-e", Policy: "e2e-tpm-ecc", Dir: t.TempDir(), EK: tpmnode.EKECC}
	eccCSR, err := attestedCSR(t, bootstrapClient, attestorE, "tpm-node-e")
	if err != nil {
		t.Fatal(err)
	}
	if got := create(t, bootstrapClient, eccCSR); len(got.Status.Certificate) == 0 || certv1alpha1.GetCondition(got, certv1alpha1.CertificateAttested).Status != metav1.ConditionTrue {
		t.Fatalf("the ECC EK's attestation: %+v", got.Status)
	}

	// An EK outside the policy's roots.
	otherRoot := fixtures.SelfSignedCertPEM(t, "not a TPM vendor")
	tpmPolicy(t, "e2e-tpm-other-root", otherRoot, nil, readPCRs(t, tpmB))
	attestorB := &agent.TPMAttestor{Open: func() (*tpmnode.Device, error) { return tpmnode.Open(tpmB) }, Node: "tpm-node-b", Policy: "e2e-tpm-other-root", Dir: t.TempDir()}
	if _, err := attestedCSR(t, bootstrapClient, attestorB, "tpm-node-b"); !isRefusal(err, "EKNotTrusted") {
		t.Fatalf("an EK outside the policy's roots: %v", err)
	}
	requireAttestStatus(t, "tpm-node-b", "Refused", "EKNotTrusted")

	// A PCR extended: the fixed policy refuses the next attestation.
	dev, err := tpmnode.Open(tpmA)
	if err != nil {
		t.Fatal(err)
	}
	measurement := sha256.Sum256([]byte("a changed boot"))
	err = dev.ExtendPCR(7, measurement[:])
	_ = dev.Close()
	if err != nil {
		t.Fatal(err)
	}
	changed, err := attestedCSR(t, bootstrapClient, attestorA, "tpm-node-a")
	if err != nil {
		t.Fatal(err)
	}
	requireRefusedAtCreate(t, "PCR 7 extended", create(t, bootstrapClient, changed), "PCRMismatch")
	requireAttestStatus(t, "tpm-node-a", "Refused", "PCRMismatch")
}

// attestationAt is what a NodeAttestation's status says of its last
// attestation.
type attestationAt struct {
	Phase                attv1alpha1.NodeAttestationPhase
	BoundNode            string
	LastRequest          string
	FirstUse             bool
	ChallengeOutstanding bool
}

func attestationOf(na *attv1alpha1.NodeAttestation) attestationAt {
	at := attestationAt{Phase: na.Status.Phase, BoundNode: na.Status.BoundNode, ChallengeOutstanding: na.Status.Challenge != nil}
	if last := na.Status.LastAttested; last != nil {
		at.LastRequest, at.FirstUse = last.Request, last.FirstUse
	}
	return at
}

func isRefusal(err error, reason string) bool {
	var refusal *agent.AttestationRefusal
	return errors.As(err, &refusal) && strings.Contains(err.Error(), reason)
}

// verifyChain checks a certificate against a CA bundle and its subject.
func verifyChain(t *testing.T, certPEM []byte, bundle, cn string) {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("the certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(bundle))
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the certificate does not chain to the CA: %v", err)
	}
	if cert.Subject.CommonName != cn {
		t.Fatalf("subject %v", cert.Subject)
	}
}

// requireAttestStatus runs `kubectl rekey attest status NODE` as the admin
// and checks the phase and reason it shows.
func requireAttestStatus(t *testing.T, node string, want ...string) {
	t.Helper()
	plugin := framework.Binary(t, "kubectl-rekey")
	env := []string{"PATH=" + filepath.Dir(plugin) + string(os.PathListSeparator) + os.Getenv("PATH")}
	framework.Eventually(t, 30*time.Second, fmt.Sprintf("kubectl rekey attest status %s showing %v", node, want), func(context.Context) error {
		stdout, stderr, err := framework.RunKubectlWithEnv(t, cluster.AdminKubeconfig, env, nil, "rekey", "attest", "status", node)
		if err != nil {
			return fmt.Errorf("%w: %s", err, stderr)
		}
		for _, w := range want {
			if !strings.Contains(stdout, w) {
				return fmt.Errorf("no %q in:\n%s", w, stdout)
			}
		}
		return nil
	})
}
