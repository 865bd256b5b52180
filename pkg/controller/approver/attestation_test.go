package approver

import (
	"context"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	"rekey.io/rekey/pkg/issuer"
	"rekey.io/rekey/test/fixtures"
)

// A request for a signer in Attestation mode is decided at its create
// only (its evidence answers a single-use challenge, and the names it
// asks for are checked there): the approver, even with a host cluster in
// which the Node lists every name asked for and an authorizer that allows
// everything, never approves one, whether it names the node's own address
// or kube-apiserver's, nor is the signer watched.
func TestHandleNeverApprovesAttestationRequests(t *testing.T) {
	serving := []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageServerAuth}
	client := []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth}
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}, {Type: corev1.NodeInternalDNS, Address: "kubernetes.default.svc"},
	}}})
	view := &issuer.ListerClusterView{Nodes: corelisters.NewNodeLister(nodes),
		Services:       corelisters.NewServiceLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})),
		EndpointSlices: discoverylisters.NewEndpointSliceLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}))}
	signer := &certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: "rekey.io:kubelet-serving-tpm"},
		Spec: certv1alpha1.SignerSpec{SignerName: "rekey.io/kubelet-serving-tpm", Approval: certv1alpha1.SignerApproval{Mode: certv1alpha1.ApprovalAttestation}}}
	if issuer.AutoApproves(signer) {
		t.Fatal("the approver watches the pending requests of an Attestation signer")
	}
	signers := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = signers.Add(signer)
	allowAll := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "", nil
	})
	for name, tc := range map[string]struct {
		dns    []string
		ips    []net.IP
		usages []certv1alpha1.KeyUsage
	}{
		"its own address":        {ips: []net.IP{net.ParseIP("10.0.0.5")}, usages: serving},
		"kubernetes.default.svc": {dns: []string{"kubernetes.default.svc"}, usages: serving},
		"a client certificate":   {usages: client},
	} {
		t.Run(name, func(t *testing.T) {
			csr := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "tpm-csr"}, Spec: certv1alpha1.CertificateSigningRequestSpec{
				SignerName: signer.Spec.SignerName, Username: "system:node:n1", Groups: []string{"system:nodes"}, Usages: tc.usages,
				Request: fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}, DNSNames: tc.dns, IPAddresses: tc.ips}),
			}}
			fakeClient := fake.NewSimpleClientset(csr)
			c := &Controller{client: fakeClient, signers: certlisters.NewSignerLister(signers), authz: allowAll, cluster: view,
				events: record.NewFakeRecorder(100), clock: clocktesting.NewFakePassiveClock(time.Unix(1000, 0))}
			if err := c.Handle(context.Background(), csr); err != nil {
				t.Fatal(err)
			}
			if actions := fakeClient.Actions(); len(actions) != 0 {
				t.Fatalf("actions %v, want none", actions)
			}
		})
	}
}
