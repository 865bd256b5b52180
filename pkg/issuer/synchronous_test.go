package issuer

import (
	"context"
	"crypto/x509"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"rekey.io/rekey/pkg/apis/certificates"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/policy"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
	"rekey.io/rekey/pkg/signing/signingtest"
	"rekey.io/rekey/test/fixtures"
)

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

type records struct {
	mu   sync.Mutex
	list []issuance.Record
}

func (r *records) Record(_ context.Context, rec issuance.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, rec)
	return nil
}

// authz allows "approve" on signers to user "approver" and
// create certificatesigningrequests/selfnodeclient to system:nodes; it
// counts its calls.
type authz struct{ calls int }

func (a *authz) authorizer() authorizer.Authorizer { return authorizer.AuthorizerFunc(a.authorize) }

func (a *authz) authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	a.calls++
	switch {
	case attrs.GetResource() == "signers" && attrs.GetVerb() == "approve" && attrs.GetUser().GetName() == "approver":
		return authorizer.DecisionAllow, "", nil
	case attrs.GetSubresource() == SubresourceSelfNodeClient && attrs.GetVerb() == "create" && contains(attrs.GetUser().GetGroups(), "system:nodes"):
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

type fixture struct {
	sync    *Synchronous
	records *records
	authz   *authz
	caCert  *x509.Certificate
	// caIndexer holds the CertificateAuthority "ca" the listers read.
	caIndexer cache.Indexer
}

// newFixture serves two signers with one CA: example.com/manual (Manual
// approval, client auth only) and example.com/nodes (NodeClient).
// withKey=false leaves the CA without a key, as on a replica that cannot
// reach it.
func newFixture(t *testing.T, withKey bool) *fixture {
	t.Helper()
	ctx := context.Background()
	caIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	signerIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	keys := signingtest.NewMemoryKeys()
	bindings := cabinding.NewMemoryStore()
	if err := caIndexer.Add(&rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "ca", UID: "0123456789"}}); err != nil {
		t.Fatal(err)
	}
	f := &fixture{records: &records{}, authz: &authz{}, caIndexer: caIndexer}
	if withKey {
		key, _, err := keys.GetOrCreate(ctx, "ca-01234567-1", signing.ECDSAP256)
		if err != nil {
			t.Fatal(err)
		}
		if f.caCert, err = signing.NewSelfSignedCA("CA", key, 24*time.Hour, now); err != nil {
			t.Fatal(err)
		}
		if _, err := bindings.Create(ctx, &cabinding.Binding{CAName: "ca", CAUID: "0123456789", KeyID: "ca-01234567-1", Certificate: f.caCert.Raw}); err != nil {
			t.Fatal(err)
		}
	}
	for name, mode := range map[string]certv1alpha1.ApprovalMode{"example.com/manual": certv1alpha1.ApprovalManual, "example.com/nodes": certv1alpha1.ApprovalNodeClient,
		"example.com/tpm": certv1alpha1.ApprovalAttestation, policy.InsecureTestSignerName: certv1alpha1.ApprovalAttestation} {
		err := signerIndexer.Add(&certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: validation.SignerObjectName(name)}, Spec: certv1alpha1.SignerSpec{
			SignerName: name, CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "ca"}, Approval: certv1alpha1.SignerApproval{Mode: mode},
			Policy: certv1alpha1.SignerPolicy{AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth}},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	authorities := authority.NewAuthorities(rotationlisters.NewCertificateAuthorityLister(caIndexer), &authority.KeyStores{Etcd: keys}, bindings)
	f.sync = &Synchronous{
		Signing:    &authority.Signing{Authorities: authorities, Recorder: f.records, Clock: clocktesting.NewFakePassiveClock(now)},
		Signers:    certlisters.NewSignerLister(signerIndexer),
		Authorizer: f.authz.authorizer(),
	}
	return f
}

func request(t *testing.T, signerName, cn string, org []string, usages ...certificates.KeyUsage) *certificates.CertificateSigningRequest {
	return &certificates.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "req", UID: "uid-1"},
		Spec: certificates.CertificateSigningRequestSpec{
			SignerName: signerName, Usages: usages, Username: cn, Groups: org,
			Request: fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: cn, Organizations: org}),
		},
	}
}

func as(name string, groups ...string) context.Context {
	return genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: name, Groups: groups})
}

func TestAtApproval(t *testing.T) {
	clientAuth := []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageClientAuth}
	t.Run("signs for an approver with approve on the signer", func(t *testing.T) {
		f := newFixture(t, true)
		out, err := f.sync.AtApproval(as("approver"), request(t, "example.com/manual", "alice", nil, clientAuth...), now)
		if err != nil || len(out.Certificate) == 0 || out.Failure != nil {
			t.Fatalf("outcome %+v, err %v", out, err)
		}
		certs, err := validation.ParseCertificateChain(out.Certificate)
		if err != nil {
			t.Fatal(err)
		}
		if err := certs[0].CheckSignatureFrom(f.caCert); err != nil {
			t.Fatalf("not signed by the CA: %v", err)
		}
		if len(f.records.list) != 1 || f.records.list[0].Serial != certs[0].SerialNumber.Text(16) || f.records.list[0].CSRUID != "uid-1" {
			t.Fatalf("records %+v, want the issued serial", f.records.list)
		}
	})
	t.Run("refuses an approver without approve, signing nothing", func(t *testing.T) {
		f := newFixture(t, true)
		_, err := f.sync.AtApproval(as("mallory"), request(t, "example.com/manual", "alice", nil, clientAuth...), now)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `"approve"`) {
			t.Fatalf("err %v, want Forbidden naming approve", err)
		}
		if len(f.records.list) != 0 {
			t.Fatal("signed for an unauthorized approver")
		}
	})
	t.Run("a policy violation fails in the same write", func(t *testing.T) {
		f := newFixture(t, true)
		out, err := f.sync.AtApproval(as("approver"), request(t, "example.com/manual", "alice", nil, certificates.UsageServerAuth), now)
		if err != nil || out.Failure == nil || out.Failure.Reason != ReasonPolicyViolation || len(out.Certificate) != 0 {
			t.Fatalf("outcome %+v, err %v", out, err)
		}
		if len(f.records.list) != 0 {
			t.Fatal("recorded a refused request")
		}
	})
	t.Run("an external signer is left to its signer", func(t *testing.T) {
		f := newFixture(t, true)
		out, err := f.sync.AtApproval(as("approver"), request(t, "other.org/x", "alice", nil, clientAuth...), now)
		if err != nil || out.Certificate != nil || out.Failure != nil || f.authz.calls != 0 {
			t.Fatalf("outcome %+v, err %v, %d authorization calls", out, err, f.authz.calls)
		}
	})
	t.Run("a CA this replica cannot reach leaves it to the signer controller", func(t *testing.T) {
		f := newFixture(t, false)
		out, err := f.sync.AtApproval(as("approver"), request(t, "example.com/manual", "alice", nil, clientAuth...), now)
		if err != nil || out.Certificate != nil || out.Failure != nil {
			t.Fatalf("outcome %+v, err %v", out, err)
		}
	})
	t.Run("nothing is decided before the Signers are listed", func(t *testing.T) {
		f := newFixture(t, true)
		f.sync.Synced = func() bool { return false }
		out, err := f.sync.AtApproval(as("approver"), request(t, "example.com/manual", "alice", nil, clientAuth...), now)
		if err != nil || out.Certificate != nil {
			t.Fatalf("outcome %+v, err %v", out, err)
		}
	})
}

func TestAtCreate(t *testing.T) {
	nodeUsages := []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageKeyEncipherment, certificates.UsageClientAuth}
	t.Run("a node with selfnodeclient is approved and signed", func(t *testing.T) {
		f := newFixture(t, true)
		out, err := f.sync.AtCreate(context.Background(), request(t, "example.com/nodes", "system:node:n1", []string{"system:nodes"}, nodeUsages...))
		if err != nil || out.Approval == nil || out.Approval.Reason != ReasonAutoApproved || !strings.Contains(out.Approval.Message, "selfnodeclient") || len(out.Certificate) == 0 {
			t.Fatalf("outcome %+v, err %v", out, err)
		}
	})
	t.Run("a requester without the permission stays pending", func(t *testing.T) {
		f := newFixture(t, true)
		out, err := f.sync.AtCreate(context.Background(), request(t, "example.com/nodes", "system:node:n1", []string{"rogues"}, nodeUsages...))
		if err != nil || out.Approval != nil || out.Certificate != nil || len(f.records.list) != 0 {
			t.Fatalf("outcome %+v, err %v", out, err)
		}
	})
	t.Run("a manual signer is never approved at create", func(t *testing.T) {
		f := newFixture(t, true)
		out, err := f.sync.AtCreate(context.Background(), request(t, "example.com/manual", "system:node:n1", []string{"system:nodes"}, nodeUsages...))
		if err != nil || out.Approval != nil || f.authz.calls != 0 {
			t.Fatalf("outcome %+v, err %v, %d reviews", out, err, f.authz.calls)
		}
	})
	t.Run("approved without a reachable key: approved, signed later", func(t *testing.T) {
		f := newFixture(t, false)
		out, err := f.sync.AtCreate(context.Background(), request(t, "example.com/nodes", "system:node:n1", []string{"system:nodes"}, nodeUsages...))
		if err != nil || out.Approval == nil || out.Certificate != nil {
			t.Fatalf("outcome %+v, err %v", out, err)
		}
	})
}

func TestAtCreateGrantedNodeClient(t *testing.T) {
	nodeUsages := []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageKeyEncipherment, certificates.UsageClientAuth}
	self := WithNodeClientGrant(context.Background(), SubresourceSelfNodeClient)
	t.Run("approved and signed without a second review", func(t *testing.T) {
		f := newFixture(t, true)
		// The requester is not in system:nodes: the fixture's authorizer
		// would refuse, so only the grant can have approved it.
		out, err := f.sync.AtCreate(self, request(t, "example.com/nodes", "system:node:n1", []string{"system:nodes"}, nodeUsages...))
		if err != nil || out.Approval == nil || !strings.Contains(out.Approval.Message, "authorized as create certificatesigningrequests/selfnodeclient") ||
			len(out.Certificate) == 0 || f.authz.calls != 0 || len(f.records.list) != 1 {
			t.Fatalf("outcome %+v, err %v, %d reviews, %d records", out, err, f.authz.calls, len(f.records.list))
		}
	})
	t.Run("approved without a reachable key: approved, signed later", func(t *testing.T) {
		f := newFixture(t, false)
		out, err := f.sync.AtCreate(self, request(t, "example.com/nodes", "system:node:n1", []string{"system:nodes"}, nodeUsages...))
		if err != nil || out.Approval == nil || out.Certificate != nil {
			t.Fatalf("outcome %+v, err %v", out, err)
		}
	})
	for _, tc := range []struct {
		name  string
		grant string
		csr   *certificates.CertificateSigningRequest
		want  string
	}{
		{"a Manual signer", SubresourceSelfNodeClient, request(t, "example.com/manual", "system:node:n1", []string{"system:nodes"}, nodeUsages...), "approves in Manual mode"},
		{"an Attestation signer", SubresourceSelfNodeClient, request(t, "example.com/tpm", "system:node:n1", []string{"system:nodes"}, nodeUsages...), "approves in Attestation mode"},
		{"an external signer", SubresourceSelfNodeClient, request(t, "example.com/external", "system:node:n1", []string{"system:nodes"}, nodeUsages...), "not served by a Signer"},
		{"not a node client request", SubresourceSelfNodeClient, request(t, "example.com/nodes", "system:node:n1", []string{"system:nodes", "admins"}, nodeUsages...), "must be a node client request"},
		{"other usages", SubresourceSelfNodeClient, request(t, "example.com/nodes", "system:node:n1", []string{"system:nodes"}, certificates.UsageClientAuth), "must be a node client request"},
		{"selfnodeclient for another node", SubresourceSelfNodeClient, withRequester(request(t, "example.com/nodes", "system:node:n1", []string{"system:nodes"}, nodeUsages...), "system:node:n2"), "covers only your own node"},
		{"nodeclient for one's own node", SubresourceNodeClient, request(t, "example.com/nodes", "system:node:n1", []string{"system:nodes"}, nodeUsages...), "goes through selfnodeclient"},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			f := newFixture(t, true)
			out, err := f.sync.AtCreate(WithNodeClientGrant(context.Background(), tc.grant), tc.csr)
			if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "certificatesigningrequests/"+tc.grant) {
				t.Fatalf("err %v, want BadRequest containing %q", err, tc.want)
			}
			if out.Approval != nil || out.Certificate != nil || len(f.records.list) != 0 || f.authz.calls != 0 {
				t.Fatalf("outcome %+v, %d records, %d reviews", out, len(f.records.list), f.authz.calls)
			}
		})
	}
	t.Run("nodeclient for another node (bootstrap)", func(t *testing.T) {
		f := newFixture(t, true)
		out, err := f.sync.AtCreate(WithNodeClientGrant(context.Background(), SubresourceNodeClient),
			withRequester(request(t, "example.com/nodes", "system:node:n1", []string{"system:nodes"}, nodeUsages...), "system:bootstrap:abcdef"))
		if err != nil || out.Approval == nil || !strings.Contains(out.Approval.Message, "certificatesigningrequests/nodeclient") || len(out.Certificate) == 0 {
			t.Fatalf("outcome %+v, err %v", out, err)
		}
	})
	t.Run("the Signer list not loaded: retry later, nothing stored", func(t *testing.T) {
		f := newFixture(t, true)
		f.sync.Synced = func() bool { return false }
		_, err := f.sync.AtCreate(self, request(t, "example.com/nodes", "system:node:n1", []string{"system:nodes"}, nodeUsages...))
		if !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("err %v, want ServiceUnavailable", err)
		}
	})
	t.Run("a built-in Signer not made yet: retry later, not refused", func(t *testing.T) {
		f := newFixture(t, true)
		_, err := f.sync.AtCreate(self, request(t, "rekey.io/kube-apiserver-client-kubelet", "system:node:n1", []string{"system:nodes"}, nodeUsages...))
		if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "built-in") {
			t.Fatalf("err %v, want ServiceUnavailable (the leader creates the built-in Signers after the server serves)", err)
		}
	})
}

func withRequester(csr *certificates.CertificateSigningRequest, name string) *certificates.CertificateSigningRequest {
	csr.Spec.Username = name
	return csr
}

// attestor answers with a fixed outcome and counts its calls.
type attestor struct {
	out   *Attestation
	err   error
	calls int
}

func (a *attestor) Attest(context.Context, *certv1alpha1.Signer, *certv1alpha1.CertificateSigningRequest) (*Attestation, error) {
	a.calls++
	return a.out, a.err
}

func TestAtCreateAttestation(t *testing.T) {
	nodeUsages := []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageKeyEncipherment, certificates.UsageClientAuth}
	req := func(t *testing.T) *certificates.CertificateSigningRequest {
		return request(t, "example.com/tpm", "system:node:n1", []string{"system:nodes"}, nodeUsages...)
	}
	t.Run("evidence that passes: approved, attested and signed", func(t *testing.T) {
		f := newFixture(t, true)
		f.sync.Attestor = &attestor{out: &Attestation{Passed: true, Decision: Decision{Reason: "TPMQuoteVerified", Message: "m"}}}
		out, err := f.sync.AtCreate(context.Background(), req(t))
		if err != nil || out.Approval == nil || out.Attestation == nil || !out.Attestation.Passed || len(out.Certificate) == 0 || len(f.records.list) != 1 {
			t.Fatalf("outcome %+v, err %v", out, err)
		}
	})
	t.Run("the insecure test signer's approval does not claim a TPM was verified", func(t *testing.T) {
		f := newFixture(t, true)
		f.sync.Attestor = &attestor{out: &Attestation{Passed: true, Decision: Decision{Reason: "InsecureTest", Message: "Nothing was verified"}}}
		out, err := f.sync.AtCreate(context.Background(), request(t, policy.InsecureTestSignerName, "system:node:n1", []string{"system:nodes"}, nodeUsages...))
		if err != nil || out.Approval == nil {
			t.Fatalf("outcome %+v, err %v", out, err)
		}
		if m := out.Approval.Message; strings.Contains(m, "TPM") || !strings.Contains(m, "without verifying anything") {
			t.Fatalf("approval message %q claims a verification or does not say none was made", m)
		}
	})
	t.Run("a refusal: pending with the reason, nothing signed", func(t *testing.T) {
		f := newFixture(t, true)
		f.sync.Attestor = &attestor{out: &Attestation{Decision: Decision{Reason: "PCRMismatch", Message: "m"}}}
		out, err := f.sync.AtCreate(context.Background(), req(t))
		if err != nil || out.Approval != nil || out.Attestation == nil || out.Attestation.Reason != "PCRMismatch" || out.Certificate != nil || len(f.records.list) != 0 {
			t.Fatalf("outcome %+v, err %v", out, err)
		}
	})
	t.Run("undecided: stored as it is", func(t *testing.T) {
		f := newFixture(t, true)
		f.sync.Attestor = &attestor{err: errors.New("etcd unavailable")}
		out, err := f.sync.AtCreate(context.Background(), req(t))
		if err != nil || out.Approval != nil || out.Attestation != nil || out.Certificate != nil {
			t.Fatalf("outcome %+v, err %v", out, err)
		}
	})
	t.Run("a NodeClient review never approves an Attestation signer", func(t *testing.T) {
		f := newFixture(t, true)
		out, err := f.sync.AtCreate(context.Background(), req(t))
		if err != nil || out.Approval != nil || f.authz.calls != 0 {
			t.Fatalf("outcome %+v, err %v, %d reviews", out, err, f.authz.calls)
		}
	})
}
