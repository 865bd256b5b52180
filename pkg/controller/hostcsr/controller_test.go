package hostcsr

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	kubefake "k8s.io/client-go/kubernetes/fake"
	certv1listers "k8s.io/client-go/listers/certificates/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/issuer"
	"rekey.io/rekey/pkg/registry/printers"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
	"rekey.io/rekey/pkg/signing/signingtest"
	"rekey.io/rekey/test/fixtures"
)

var now = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

const signerName = "rekey.io/hostcsr-unit"

type memoryRecorder struct {
	mu      sync.Mutex
	records []issuance.Record
}

func (r *memoryRecorder) Record(_ context.Context, rec issuance.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
	return nil
}

// fakeAuthz allows what allow says and remembers what it was asked.
type fakeAuthz struct {
	allow bool
	// only, when set, is the one subresource allowed.
	only  string
	asked []authorizer.Attributes
}

func (a *fakeAuthz) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	a.asked = append(a.asked, attrs)
	if a.allow || a.only != "" && attrs.GetSubresource() == a.only {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func (a *fakeAuthz) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	d, reason, err := a.Authorize(ctx, attrs)
	return authorizer.ConditionsAwareDecisionFromParts(d, reason, err)
}

func (a *fakeAuthz) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionNoOpinion, "", nil
}

// fakeCluster holds Nodes; nothing is reserved.
type fakeCluster struct{ nodes map[string]*corev1.Node }

func (f fakeCluster) Node(name string) (*corev1.Node, error) {
	if n, ok := f.nodes[name]; ok {
		return n, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, name)
}

func (f fakeCluster) ListNodes() ([]*corev1.Node, error) {
	var out []*corev1.Node
	for _, n := range f.nodes {
		out = append(out, n)
	}
	return out, nil
}

func (fakeCluster) ListServices() ([]*corev1.Service, error) { return nil, nil }
func (fakeCluster) Reserved(net.IP) (string, bool, error)    { return "", false, nil }

type fixture struct {
	kube     *kubefake.Clientset
	authz    *fakeAuthz
	events   *record.FakeRecorder
	recorder *memoryRecorder
	c        *Controller
}

// newFixture is a controller with one CA bound to a key and one Signer of
// signerName in the given mode; hostCluster sets
// spec.hostCluster.certificateSigningRequests.
func newFixture(t *testing.T, mode certv1alpha1.ApprovalMode, hostCluster bool, csrs ...*certificatesv1.CertificateSigningRequest) *fixture {
	t.Helper()
	ctx := context.Background()
	caIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	signerIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	csrIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	keys := signingtest.NewMemoryKeys()
	bindings := cabinding.NewMemoryStore()
	key, _, err := keys.GetOrCreate(ctx, "host-ca-01234567-1", signing.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := signing.NewSelfSignedCA("host CA", key, 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bindings.Create(ctx, &cabinding.Binding{CAName: "host-ca", CAUID: "0123456789", KeyID: "host-ca-01234567-1", Certificate: caCert.Raw}); err != nil {
		t.Fatal(err)
	}
	ca := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "host-ca", UID: types.UID("0123456789")},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd}}}
	if err := caIndexer.Add(ca); err != nil {
		t.Fatal(err)
	}
	s := &certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: validation.SignerObjectName(signerName)},
		Spec: certv1alpha1.SignerSpec{SignerName: signerName, CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "host-ca"},
			Policy: certv1alpha1.SignerPolicy{
				AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth, certv1alpha1.UsageServerAuth},
				MaxDuration:   metav1.Duration{Duration: time.Hour},
				Subject:       certv1alpha1.SubjectPolicy{CommonNamePrefix: "system:node:"},
				SubjectAltNames: certv1alpha1.SubjectAltNamePolicy{
					Allowed: []certv1alpha1.SubjectAltNameType{certv1alpha1.SANTypeDNS, certv1alpha1.SANTypeIP}},
			},
			Approval: certv1alpha1.SignerApproval{Mode: mode}}}
	if hostCluster {
		s.Spec.HostCluster = &certv1alpha1.HostClusterServing{CertificateSigningRequests: true}
	}
	if err := signerIndexer.Add(s); err != nil {
		t.Fatal(err)
	}
	objs := []runtime.Object{}
	for _, csr := range csrs {
		if err := csrIndexer.Add(csr); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, csr)
	}
	f := &fixture{kube: kubefake.NewClientset(objs...), authz: &fakeAuthz{}, events: record.NewFakeRecorder(10), recorder: &memoryRecorder{}}
	authorities := authority.NewAuthorities(rotationlisters.NewCertificateAuthorityLister(caIndexer), &authority.KeyStores{Etcd: keys}, bindings)
	clk := clocktesting.NewFakePassiveClock(now)
	f.c = &Controller{
		deps: Deps{
			Kube: f.kube, Authorizer: f.authz, Events: f.events, Clock: clk,
			Cluster: fakeCluster{nodes: map[string]*corev1.Node{"n1": {
				ObjectMeta: metav1.ObjectMeta{Name: "n1"},
				Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
					{Type: corev1.NodeHostName, Address: "n1.example.com"}, {Type: corev1.NodeInternalIP, Address: "10.0.0.5"}}},
			}}},
			Signing: &authority.Signing{Authorities: authorities, Recorder: f.recorder, Clock: clk},
		},
		csrs:    certv1listers.NewCertificateSigningRequestLister(csrIndexer),
		signers: certlisters.NewSignerLister(signerIndexer),
	}
	return f
}

func nativeCSR(request []byte, signer, user string, groups []string, usages ...certificatesv1.KeyUsage) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "csr-1", UID: "uid-1", ResourceVersion: "1"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: request, SignerName: signer, Usages: usages, Username: user, Groups: groups,
			Extra: map[string]certificatesv1.ExtraValue{"k": {"v"}},
		},
	}
}

func approved(csr *certificatesv1.CertificateSigningRequest) *certificatesv1.CertificateSigningRequest {
	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "KubectlApprove"})
	return csr
}

func nodeClientCSR(t *testing.T, user string, usages ...certificatesv1.KeyUsage) *certificatesv1.CertificateSigningRequest {
	req := fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}})
	if len(usages) == 0 {
		usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth}
	}
	return nativeCSR(req, signerName, user, []string{"system:bootstrappers"}, usages...)
}

func servingCSR(t *testing.T, dns ...string) *certificatesv1.CertificateSigningRequest {
	req := fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}, DNSNames: dns,
		IPAddresses: []net.IP{net.ParseIP("10.0.0.5")}})
	return nativeCSR(req, signerName, "system:node:n1", []string{"system:nodes", "system:authenticated"},
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth)
}

// writes returns the fake clientset's writes (verb/subresource).
func writes(kube *kubefake.Clientset) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range kube.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			out = append(out, a)
		}
	}
	return out
}

func onlyUpdate(t *testing.T, kube *kubefake.Clientset, subresource string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	w := writes(kube)
	if len(w) != 1 || w[0].GetVerb() != "update" || w[0].GetSubresource() != subresource {
		t.Fatalf("writes = %v, want one update of /%s", w, subresource)
	}
	return w[0].(k8stesting.UpdateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
}

func TestNodeClientApprovedBySubjectAccessReviewInKubeGroup(t *testing.T) {
	csr := nodeClientCSR(t, "system:bootstrap:abcdef")
	f := newFixture(t, certv1alpha1.ApprovalNodeClient, true, csr)
	f.authz.allow = true
	if _, err := f.c.Handle(context.Background(), csr); err != nil {
		t.Fatal(err)
	}
	got := onlyUpdate(t, f.kube, "approval")
	cond := got.Status.Conditions[len(got.Status.Conditions)-1]
	if cond.Type != certificatesv1.CertificateApproved || cond.Status != corev1.ConditionTrue || cond.Reason != issuer.ReasonAutoApproved {
		t.Fatalf("condition = %+v, want Approved True AutoApproved", cond)
	}
	if e := nextEvent(t, f); e != "Normal Approved "+cond.Reason+": "+cond.Message {
		t.Fatalf("event %q, want Approved with the reason", e)
	}
	if len(f.authz.asked) != 1 {
		t.Fatalf("asked %d reviews, want 1", len(f.authz.asked))
	}
	a := f.authz.asked[0]
	if a.GetAPIGroup() != "certificates.k8s.io" || a.GetResource() != "certificatesigningrequests" || a.GetSubresource() != "nodeclient" ||
		a.GetVerb() != "create" || a.GetUser().GetName() != "system:bootstrap:abcdef" || a.GetUser().GetGroups()[0] != "system:bootstrappers" ||
		a.GetUser().GetExtra()["k"][0] != "v" {
		t.Fatalf("review = %+v, want create certificates.k8s.io certificatesigningrequests/nodeclient as the requester", a)
	}
}

// nextEvent is the next event the handler recorded.
func nextEvent(t *testing.T, f *fixture) string {
	t.Helper()
	select {
	case e := <-f.events.Events:
		return e
	default:
		t.Fatal("no event")
		return ""
	}
}

func TestNodeClientNotAllowedStaysPending(t *testing.T) {
	csr := nodeClientCSR(t, "system:node:n1")
	f := newFixture(t, certv1alpha1.ApprovalNodeClient, true, csr)
	if _, err := f.c.Handle(context.Background(), csr); err != nil {
		t.Fatal(err)
	}
	if w := writes(f.kube); len(w) != 0 {
		t.Fatalf("writes = %v, want none", w)
	}
	if len(f.authz.asked) != 2 || f.authz.asked[0].GetSubresource() != "selfnodeclient" || f.authz.asked[1].GetSubresource() != "nodeclient" {
		t.Fatalf("reviews = %v, want selfnodeclient then nodeclient", f.authz.asked)
	}
}

// TestNodeClientSelfRenewalByNodeclient: a node renewing its own
// certificate is approved when it may have any node's (nodeclient), as
// kube-controller-manager's approver does.
func TestNodeClientSelfRenewalByNodeclient(t *testing.T) {
	csr := nodeClientCSR(t, "system:node:n1")
	f := newFixture(t, certv1alpha1.ApprovalNodeClient, true, csr)
	f.authz.allow, f.authz.only = false, "nodeclient"
	if _, err := f.c.Handle(context.Background(), csr); err != nil {
		t.Fatal(err)
	}
	got := onlyUpdate(t, f.kube, "approval")
	if cond := got.Status.Conditions[len(got.Status.Conditions)-1]; cond.Type != certificatesv1.CertificateApproved || !strings.Contains(cond.Message, "/nodeclient") {
		t.Fatalf("condition = %+v, want Approved after the nodeclient review", cond)
	}
}

func TestNodeServing(t *testing.T) {
	t.Run("the Node's addresses are approved", func(t *testing.T) {
		csr := servingCSR(t, "n1.example.com")
		f := newFixture(t, certv1alpha1.ApprovalNodeServing, true, csr)
		if _, err := f.c.Handle(context.Background(), csr); err != nil {
			t.Fatal(err)
		}
		got := onlyUpdate(t, f.kube, "approval")
		if c := got.Status.Conditions[0]; c.Type != certificatesv1.CertificateApproved || c.Reason != issuer.ReasonAutoApproved {
			t.Fatalf("condition = %+v", c)
		}
	})
	t.Run("an extra SAN stays pending with an event naming the rule", func(t *testing.T) {
		csr := servingCSR(t, "n1.example.com", "evil.example.com")
		csr.CreationTimestamp = metav1.NewTime(now.Add(-time.Minute))
		f := newFixture(t, certv1alpha1.ApprovalNodeServing, true, csr)
		requeue, err := f.c.Handle(context.Background(), csr)
		if err != nil {
			t.Fatal(err)
		}
		// Young: decided again soon (rekey's Node cache may lag).
		if requeue != servingRecheck {
			t.Errorf("requeue = %v, want %v", requeue, servingRecheck)
		}
		old := csr.DeepCopy()
		old.CreationTimestamp = metav1.NewTime(now.Add(-servingRecheckFor))
		if requeue, err := f.c.Handle(context.Background(), old); err != nil || requeue != 0 {
			t.Errorf("old CSR: requeue %v, err %v; want neither", requeue, err)
		}
		if w := writes(f.kube); len(w) != 0 {
			t.Fatalf("writes = %v, want none (never denied)", w)
		}
		select {
		case e := <-f.events.Events:
			if !strings.HasPrefix(e, "Warning NotAutoApproved") || !strings.Contains(e, `DNS name "evil.example.com" is not among Node n1's addresses`) {
				t.Fatalf("event = %q", e)
			}
		default:
			t.Fatal("no event")
		}
	})
}

func TestSignsApprovedRequest(t *testing.T) {
	csr := approved(nodeClientCSR(t, "system:node:n1", certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth))
	f := newFixture(t, certv1alpha1.ApprovalManual, true, csr)
	if _, err := f.c.Handle(context.Background(), csr); err != nil {
		t.Fatal(err)
	}
	got := onlyUpdate(t, f.kube, "status")
	block, _ := pem.Decode(got.Status.Certificate)
	if block == nil {
		t.Fatalf("status.certificate = %q, want a PEM certificate", got.Status.Certificate)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "system:node:n1" {
		t.Fatalf("CN = %q", cert.Subject.CommonName)
	}
	if e := nextEvent(t, f); !strings.HasPrefix(e, "Normal Issued issued by") || !strings.Contains(e, "serial "+printers.SerialHex(cert.SerialNumber)) {
		t.Fatalf("event %q, want Issued naming the serial", e)
	}
	if len(f.recorder.records) != 1 {
		t.Fatalf("records = %v, want 1", f.recorder.records)
	}
	rec := f.recorder.records[0]
	if rec.CSRName != "certificates.k8s.io:csr-1" || rec.CSRUID != "uid-1" || rec.Requester != "system:node:n1" || rec.Holder != "system:node:n1" ||
		rec.SignerName != signerName || rec.CAName != "host-ca" {
		t.Fatalf("record = %+v", rec)
	}

	// Queued again before the informer shows the write: not signed twice.
	f.kube.ClearActions()
	if _, err := f.c.Handle(context.Background(), csr); err != nil {
		t.Fatal(err)
	}
	if w := writes(f.kube); len(w) != 0 || len(f.recorder.records) != 1 {
		t.Fatalf("second Handle wrote %v and recorded %d, want nothing new", w, len(f.recorder.records))
	}
}

func TestPolicyViolationFails(t *testing.T) {
	// Outside the policy's CN prefix, whoever approved it.
	req := fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "admin"})
	csr := approved(nativeCSR(req, signerName, "alice", nil, certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth))
	f := newFixture(t, certv1alpha1.ApprovalManual, true, csr)
	if _, err := f.c.Handle(context.Background(), csr); err != nil {
		t.Fatal(err)
	}
	got := onlyUpdate(t, f.kube, "status")
	if len(got.Status.Certificate) != 0 {
		t.Fatal("a certificate was issued")
	}
	c := got.Status.Conditions[len(got.Status.Conditions)-1]
	if c.Type != certificatesv1.CertificateFailed || c.Status != corev1.ConditionTrue || c.Reason == "" || !strings.Contains(c.Message, "system:node:") {
		t.Fatalf("condition = %+v, want Failed naming the rule", c)
	}
	if e := nextEvent(t, f); e != "Warning Failed "+c.Reason+": "+c.Message {
		t.Fatalf("event %q, want Failed with the rule", e)
	}
	if len(f.recorder.records) != 0 {
		t.Fatalf("records = %v", f.recorder.records)
	}
}

func TestLeavesAlone(t *testing.T) {
	for name, tc := range map[string]struct {
		mode        certv1alpha1.ApprovalMode
		hostCluster bool
		csr         func(*certificatesv1.CertificateSigningRequest) *certificatesv1.CertificateSigningRequest
	}{
		"signer without hostCluster, approved":  {mode: certv1alpha1.ApprovalManual, csr: approved},
		"signer without hostCluster, auto mode": {mode: certv1alpha1.ApprovalNodeClient},
		"another signer name": {mode: certv1alpha1.ApprovalManual, hostCluster: true, csr: func(c *certificatesv1.CertificateSigningRequest) *certificatesv1.CertificateSigningRequest {
			c = approved(c)
			c.Spec.SignerName = "rekey.io/other"
			return c
		}},
		"Manual, pending":  {mode: certv1alpha1.ApprovalManual, hostCluster: true},
		"Attestation mode": {mode: certv1alpha1.ApprovalAttestation, hostCluster: true, csr: approved},
		"denied": {mode: certv1alpha1.ApprovalManual, hostCluster: true, csr: func(c *certificatesv1.CertificateSigningRequest) *certificatesv1.CertificateSigningRequest {
			c = approved(c)
			c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue})
			return c
		}},
		"already issued": {mode: certv1alpha1.ApprovalManual, hostCluster: true, csr: func(c *certificatesv1.CertificateSigningRequest) *certificatesv1.CertificateSigningRequest {
			c = approved(c)
			c.Status.Certificate = []byte("x")
			return c
		}},
	} {
		t.Run(name, func(t *testing.T) {
			csr := nodeClientCSR(t, "system:node:n1")
			if tc.csr != nil {
				csr = tc.csr(csr)
			}
			f := newFixture(t, tc.mode, tc.hostCluster, csr)
			f.authz.allow = true
			if _, err := f.c.Handle(context.Background(), csr); err != nil {
				t.Fatal(err)
			}
			if w := writes(f.kube); len(w) != 0 || len(f.authz.asked) != 0 || len(f.recorder.records) != 0 {
				t.Fatalf("writes %v, reviews %d, records %d: want none", w, len(f.authz.asked), len(f.recorder.records))
			}
		})
	}
}

// TestNodeServingRefusals: a refusal about the request itself is final (no
// recheck) and put into one event however often the CSR is decided; one
// that rests on the Node as read is looked at again.
func TestNodeServingRefusals(t *testing.T) {
	t.Run("final, one event", func(t *testing.T) {
		csr := servingCSR(t, "n1.example.com")
		csr.Spec.Username, csr.Spec.Groups = "mallory", []string{"system:authenticated"}
		f := newFixture(t, certv1alpha1.ApprovalNodeServing, true, csr)
		for range 3 {
			again, err := f.c.Handle(context.Background(), csr)
			if err != nil {
				t.Fatal(err)
			}
			if again != 0 {
				t.Fatalf("a refusal of a requester that is no node is looked at again in %s", again)
			}
		}
		if n := len(f.events.Events); n != 1 {
			t.Fatalf("%d events for one refusal, want 1", n)
		}
	})
	t.Run("a Node not seen yet is looked at again", func(t *testing.T) {
		req := fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:node:n2", Organizations: []string{"system:nodes"}, DNSNames: []string{"n2.example.com"}})
		csr := nativeCSR(req, signerName, "system:node:n2", []string{"system:nodes", "system:authenticated"},
			certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth)
		csr.CreationTimestamp = metav1.NewTime(now)
		f := newFixture(t, certv1alpha1.ApprovalNodeServing, true, csr)
		again, err := f.c.Handle(context.Background(), csr)
		if err != nil {
			t.Fatal(err)
		}
		if again != servingRecheck {
			t.Fatalf("looked at again in %s, want %s", again, servingRecheck)
		}
	})
}

// TestRefusedStatusWriteReusesTheCertificate: when the status write fails
// (rekey may not sign that name in the host cluster, say), the retry
// writes the certificate already issued and recorded instead of issuing
// another each time.
func TestRefusedStatusWriteReusesTheCertificate(t *testing.T) {
	csr := approved(nodeClientCSR(t, "system:node:n1"))
	f := newFixture(t, certv1alpha1.ApprovalManual, true, csr)
	refusals := 3
	var written [][]byte
	f.kube.PrependReactor("update", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "status" {
			return false, nil, nil
		}
		written = append(written, a.(k8stesting.UpdateAction).GetObject().(*certificatesv1.CertificateSigningRequest).Status.Certificate)
		if refusals > 0 {
			refusals--
			return true, nil, apierrors.NewForbidden(certificatesv1.Resource("signers"), signerName, errors.New("no sign"))
		}
		return false, nil, nil
	})
	for i := 0; i < 3; i++ {
		if _, err := f.c.Handle(context.Background(), csr); err == nil {
			t.Fatalf("try %d: no error for a refused write", i)
		}
	}
	if _, err := f.c.Handle(context.Background(), csr); err != nil {
		t.Fatal(err)
	}
	if n := len(f.recorder.records); n != 1 {
		t.Fatalf("%d certificates issued and recorded over 4 tries, want 1", n)
	}
	for i, w := range written {
		if !bytes.Equal(w, written[0]) || len(w) == 0 {
			t.Fatalf("write %d carried another certificate", i)
		}
	}
}
