package nodeattest

import (
	"context"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"rekey.io/rekey/pkg/apis/attestation"
	attv1alpha1 "rekey.io/rekey/pkg/apis/attestation/v1alpha1"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/attest"
	"rekey.io/rekey/pkg/attest/attesttest"
	attlisters "rekey.io/rekey/pkg/generated/listers/attestation/v1alpha1"
	"rekey.io/rekey/pkg/issuer"
)

const tpmSigner = "rekey.io/kube-apiserver-client-kubelet-tpm"

// fakeNodes keeps NodeAttestations in a map.
type fakeNodes map[string]*attestation.NodeAttestation

func (f fakeNodes) Get(_ context.Context, name string) (*attestation.NodeAttestation, error) {
	if n, ok := f[name]; ok {
		return n.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(attestation.Resource("nodeattestations"), name)
}

func (f fakeNodes) Write(ctx context.Context, name string, change func(*attestation.NodeAttestation) error, _ []string) (*attestation.NodeAttestation, error) {
	n, err := f.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := change(n); err != nil {
		return nil, err
	}
	f[name] = n
	return n, nil
}

type fixture struct {
	svc   *Service
	store *attest.MemoryStore
	nodes fakeNodes
	node  *attesttest.Node
}

func newFixture(t *testing.T, signers ...string) *fixture {
	t.Helper()
	f := &fixture{store: attest.NewMemoryStore(), nodes: fakeNodes{}, node: attesttest.NewNode(t)}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	policy := &attv1alpha1.AttestationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: attv1alpha1.AttestationPolicySpec{
		AllowedEKPublicKeyHashes: []string{f.node.EKFingerprint},
		PCRPolicy: attv1alpha1.PCRPolicy{Mode: attv1alpha1.PCRModeFixed, Selection: []int32{7, 0},
			Values: []attv1alpha1.PCRValue{{Index: 0, Value: hex.EncodeToString(attesttest.PCR(1))}, {Index: 7, Value: hex.EncodeToString(attesttest.PCR(7))}}},
		SignerNames: signers,
	}}
	if err := indexer.Add(policy); err != nil {
		t.Fatal(err)
	}
	f.svc = &Service{Policies: attlisters.NewAttestationPolicyLister(indexer), Store: f.store, Nodes: f.nodes, Authorizer: authorizer.AuthorizerFunc(rbac),
		Clock: clocktesting.NewFakePassiveClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))}
	return f
}

// rbac is artifacts/rbac/tpm-attestation.yaml's rekey:tpm-node binding:
// the bootstrappers and every node may ask for any NodeAttestation's
// challenge (the NodeAttestationRestriction admission plugin then keeps a
// node to its own); nobody else may.
func rbac(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetVerb() != "create" || a.GetAPIGroup() != "attestation.rekey.io" || a.GetResource() != "nodeattestations" || a.GetSubresource() != "challenge" {
		return authorizer.DecisionNoOpinion, "", nil
	}
	if slices.Contains(a.GetUser().GetGroups(), "rekey:tpm-bootstrappers") || slices.Contains(a.GetUser().GetGroups(), "system:nodes") {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func (f *fixture) spec(policy string) *attestation.NodeAttestationSpec {
	return &attestation.NodeAttestationSpec{PolicyName: policy, EKPublic: f.node.EKPublic, AKPublic: f.node.AKPublic}
}

// request challenges node n1 and returns a CSR answering the challenge.
func (f *fixture) request(t *testing.T, cn string) *certv1alpha1.CertificateSigningRequest {
	t.Helper()
	f.nodes["n1"] = &attestation.NodeAttestation{ObjectMeta: metav1.ObjectMeta{Name: "n1", Generation: 1}, Spec: *f.spec("p")}
	c, fp, err := f.svc.Challenge(context.Background(), "n1", f.spec("p"))
	if err != nil {
		t.Fatal(err)
	}
	if fp != f.node.EKFingerprint || len(c.PCRSelection) != 2 || c.PCRSelection[0] != 0 || c.PCRSelection[1] != 7 || len(c.CredentialBlob) == 0 {
		t.Fatalf("challenge %+v for %s", c, fp)
	}
	secret := attesttest.KnownSecret(t, f.store, "n1")
	der, key := attesttest.CSR(t, cn, nil)
	return &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "csr-1"}, Spec: certv1alpha1.CertificateSigningRequestSpec{
		SignerName: tpmSigner, Usages: []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth},
		Username: "bootstrap", Groups: []string{"rekey:tpm-bootstrappers", "system:authenticated"},
		Request: f.node.Request(t, der, key, secret, map[int][]byte{0: attesttest.PCR(1), 7: attesttest.PCR(7)}),
	}}
}

func signer(name string) *certv1alpha1.Signer {
	return &certv1alpha1.Signer{Spec: certv1alpha1.SignerSpec{SignerName: name, Approval: certv1alpha1.SignerApproval{Mode: certv1alpha1.ApprovalAttestation}}}
}

func TestAttest(t *testing.T) {
	f := newFixture(t, tpmSigner)
	got, err := f.svc.Attest(context.Background(), signer(tpmSigner), f.request(t, "system:node:n1"))
	if err != nil || !got.Passed {
		t.Fatalf("Attest = %+v, %v", got, err)
	}
	for _, want := range []string{"node n1", "AttestationPolicy p", f.node.EKFingerprint, "first use", "[0 7]"} {
		if !strings.Contains(got.Message, want) {
			t.Errorf("message %q lacks %q", got.Message, want)
		}
	}
	st := f.nodes["n1"].Status
	if st.Phase != attestation.NodeAttestationAttested || st.BoundNode != "n1" || st.LastAttested == nil || !st.LastAttested.FirstUse ||
		st.LastAttested.Request != "csr-1" || len(st.Conditions) != 1 || st.Conditions[0].Status != metav1.ConditionTrue {
		t.Fatalf("NodeAttestation status %+v", st)
	}
	// The binding is there: the next attestation is not a first use.
	got, err = f.svc.Attest(context.Background(), signer(tpmSigner), f.request(t, "system:node:n1"))
	if err != nil || !got.Passed || strings.Contains(got.Message, "first use") {
		t.Fatalf("second Attest = %+v, %v", got, err)
	}
}

func TestAttestRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		signers []string
		csr     func(*fixture, *testing.T) *certv1alpha1.CertificateSigningRequest
		want    string
		// recorded: the NodeAttestation says Refused with the reason.
		recorded bool
	}{
		"signer not in the policy": {signers: []string{"example.com/other"}, csr: func(f *fixture, t *testing.T) *certv1alpha1.CertificateSigningRequest {
			return f.request(t, "system:node:n1")
		}, want: "SignerNotInPolicy", recorded: true},
		"another node's name": {signers: []string{tpmSigner}, csr: func(f *fixture, t *testing.T) *certv1alpha1.CertificateSigningRequest {
			csr := f.request(t, "system:node:n1")
			der, key := attesttest.CSR(t, "system:node:n2", nil)
			// n2 has no NodeAttestation.
			csr.Spec.Request = f.node.Request(t, der, key, attesttest.PCR(3), map[int][]byte{0: attesttest.PCR(1), 7: attesttest.PCR(7)})
			return csr
		}, want: "NoChallenge"},
		"not a node": {signers: []string{tpmSigner}, csr: func(f *fixture, t *testing.T) *certv1alpha1.CertificateSigningRequest {
			return f.request(t, "alice")
		}, want: "WrongSubject"},
		"no evidence": {signers: []string{tpmSigner}, csr: func(f *fixture, t *testing.T) *certv1alpha1.CertificateSigningRequest {
			csr := f.request(t, "system:node:n1")
			der, _ := attesttest.CSR(t, "system:node:n1", nil)
			csr.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
			return csr
		}, want: "NoEvidence", recorded: true},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.signers...)
			got, err := f.svc.Attest(context.Background(), signer(tpmSigner), tc.csr(f, t))
			if err != nil || got.Passed || got.Reason != tc.want {
				t.Fatalf("Attest = %+v, %v; want refused %s", got, err, tc.want)
			}
			if st := f.nodes["n1"].Status; tc.recorded && (st.Phase != attestation.NodeAttestationRefused || st.Conditions[0].Reason != tc.want) {
				t.Fatalf("NodeAttestation status %+v", st)
			}
		})
	}
}

func TestChallengeRefusals(t *testing.T) {
	f := newFixture(t, tpmSigner)
	var refusal *attest.Refusal
	if _, _, err := f.svc.Challenge(context.Background(), "n1", f.spec("missing")); !errors.As(err, &refusal) || refusal.Reason != "PolicyNotFound" {
		t.Fatalf("a missing policy: %v", err)
	}
	f.svc.Synced = func() bool { return false }
	if _, _, err := f.svc.Challenge(context.Background(), "n1", f.spec("p")); err == nil || errors.As(err, &refusal) {
		t.Fatalf("policies not read yet: %v, want an error that is not a refusal", err)
	}
}

func TestInsecureTestSigner(t *testing.T) {
	f := newFixture(t)
	csr := &certv1alpha1.CertificateSigningRequest{Spec: certv1alpha1.CertificateSigningRequestSpec{SignerName: InsecureTestSignerName}}
	got, err := f.svc.Attest(context.Background(), signer(InsecureTestSignerName), csr)
	if err != nil || got.Passed || got.Reason != "InsecureTestSignerDisabled" {
		t.Fatalf("disabled: %+v, %v", got, err)
	}
	f.svc.InsecureTestSigner = true
	got, err = f.svc.Attest(context.Background(), signer(InsecureTestSignerName), csr)
	if err != nil || !got.Passed || !strings.Contains(got.Message, "Nothing was verified") {
		t.Fatalf("enabled: %+v, %v", got, err)
	}
}

// TestAttestOnlyByWhoMayAnswer: with node n1's challenge outstanding, a
// request for n1 sent by a user who may not ask for n1's challenge, or by
// another node, is refused before anything of n1's is read: n1's
// challenge stays outstanding and its NodeAttestation unchanged. A
// refusal caused by someone who may (the bootstrap identity, n1 itself)
// is recorded but spends nothing. n1's genuine answer passes after all
// of them.
func TestAttestOnlyByWhoMayAnswer(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, tpmSigner)
	genuine := f.request(t, "system:node:n1")
	genuine.Spec.Username, genuine.Spec.Groups = "system:node:n1", []string{"system:nodes", "system:authenticated"}
	before := f.nodes["n1"].DeepCopy()
	junk := func(username string, groups ...string) *certv1alpha1.CertificateSigningRequest {
		der, key := attesttest.CSR(t, "system:node:n1", nil)
		csr := genuine.DeepCopy()
		csr.Name = "junk-from-" + username
		csr.Spec.Username, csr.Spec.Groups = username, groups
		csr.Spec.Request = f.node.Request(t, der, key, attesttest.PCR(9), map[int][]byte{0: attesttest.PCR(1), 7: attesttest.PCR(7)})
		return csr
	}
	for name, tc := range map[string]struct {
		csr  *certv1alpha1.CertificateSigningRequest
		want string
	}{
		"a requester":                 {junk("alice", "system:authenticated"), "RequesterNotAllowed"},
		"another node":                {junk("system:node:n2", "system:nodes", "system:authenticated"), "NotThisNode"},
		"a node-like name, no group":  {junk("system:node:n3", "system:authenticated"), "NotThisNode"},
		"system:nodes without a name": {junk("kubelet", "system:nodes"), "NotThisNode"},
	} {
		got, err := f.svc.Attest(ctx, signer(tpmSigner), tc.csr)
		if err != nil || got.Passed || got.Reason != tc.want {
			t.Fatalf("%s: Attest = %+v, %v; want refused %s", name, got, err, tc.want)
		}
		if diff := cmp.Diff(before, f.nodes["n1"]); diff != "" {
			t.Fatalf("%s changed n1's NodeAttestation:\n%s", name, diff)
		}
		if c, _ := f.store.GetChallenge(ctx, "n1"); c == nil {
			t.Fatalf("%s spent n1's challenge", name)
		}
	}
	// Junk from those who may answer: recorded, nothing spent.
	for _, csr := range []*certv1alpha1.CertificateSigningRequest{junk("bootstrap", "rekey:tpm-bootstrappers"), junk("system:node:n1", "system:nodes")} {
		got, err := f.svc.Attest(ctx, signer(tpmSigner), csr)
		if err != nil || got.Passed || got.Reason != "WrongSecret" {
			t.Fatalf("junk from %s: %+v, %v", csr.Spec.Username, got, err)
		}
		if st := f.nodes["n1"].Status; st.Phase != attestation.NodeAttestationRefused || st.Conditions[0].Reason != "WrongSecret" {
			t.Fatalf("junk from %s recorded as %+v", csr.Spec.Username, st)
		}
		if c, _ := f.store.GetChallenge(ctx, "n1"); c == nil {
			t.Fatalf("junk from %s spent n1's challenge", csr.Spec.Username)
		}
	}
	got, err := f.svc.Attest(ctx, signer(tpmSigner), genuine)
	if err != nil || !got.Passed {
		t.Fatalf("n1's genuine answer after the junk: %+v, %v", got, err)
	}
	if st := f.nodes["n1"].Status; st.Phase != attestation.NodeAttestationAttested || st.Challenge != nil {
		t.Fatalf("n1's NodeAttestation after its answer: %+v", st)
	}
	// An authorizer that fails decides nothing.
	f.svc.Authorizer = authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionNoOpinion, "", errors.New("webhook down")
	})
	if got, err := f.svc.Attest(ctx, signer(tpmSigner), junk("alice")); err == nil {
		t.Fatalf("decided without the authorizer: %+v", got)
	}
}

// TestAttestQuotesClientTextBriefly: a refusal quotes at most a short
// excerpt of what the requester wrote into its subject, however long.
func TestAttestQuotesClientTextBriefly(t *testing.T) {
	f := newFixture(t, tpmSigner)
	huge := strings.Repeat("é", 20000)
	for _, cn := range []string{huge, "system:node:" + huge} {
		csr := f.request(t, "system:node:n1")
		der, _ := attesttest.CSR(t, cn, nil)
		csr.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
		got, err := f.svc.Attest(context.Background(), signer(tpmSigner), csr)
		if err != nil || got.Passed || got.Reason != "WrongSubject" || len(got.Message) > 1024 {
			t.Fatalf("CN of %d bytes: %s (%d bytes), %v", len(cn), got.Reason, len(got.Message), err)
		}
	}
}

var _ issuer.Attestor = &Service{}

// TestAttestQuotesAHugeOrganizationBriefly: the same for the organization.
func TestAttestQuotesAHugeOrganizationBriefly(t *testing.T) {
	f := newFixture(t, tpmSigner)
	csr := f.request(t, "system:node:n1")
	der, key := attesttest.CSR(t, "system:node:n1", func(c *x509.CertificateRequest) { c.Subject.Organization = []string{strings.Repeat("é", 20000)} })
	csr.Spec.Request = f.node.Request(t, der, key, attesttest.PCR(3), map[int][]byte{0: attesttest.PCR(1), 7: attesttest.PCR(7)})
	got, err := f.svc.Attest(context.Background(), signer(tpmSigner), csr)
	if err != nil || got.Passed || got.Reason != "WrongSubject" || len(got.Message) > 1024 {
		t.Fatalf("organization of 40000 bytes: %s (%d bytes), %v", got.Reason, len(got.Message), err)
	}
}
