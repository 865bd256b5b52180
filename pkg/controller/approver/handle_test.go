package approver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	"rekey.io/rekey/pkg/issuer"
	"rekey.io/rekey/test/fixtures"
)

// TestHandle checks the client actions of the NodeClient approver and the
// SubjectAccessReview it asks.
func TestHandle(t *testing.T) {
	nodeUsages := []certv1alpha1.KeyUsage{certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth}
	nodeRequest := fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}})
	csr := func(signer, user string, request []byte, usages []certv1alpha1.KeyUsage) *certv1alpha1.CertificateSigningRequest {
		return &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "node-csr"},
			Spec: certv1alpha1.CertificateSigningRequestSpec{SignerName: signer, Username: user, Request: request, Usages: usages}}
	}
	tests := map[string]struct {
		csr             *certv1alpha1.CertificateSigningRequest
		allow           string // the subresource the authorizer allows
		authzErr        error
		wantSubresource string // the subresource asked about; "" for no review
		wantApproval    bool
		wantErr         bool
	}{
		"node renews its own":        {csr: csr("rekey.io/kube-apiserver-client-kubelet", "system:node:n1", nodeRequest, nodeUsages), allow: "selfnodeclient", wantSubresource: "selfnodeclient", wantApproval: true},
		"bootstrapper for a node":    {csr: csr("rekey.io/kube-apiserver-client-kubelet", "system:bootstrap:abc", nodeRequest, nodeUsages), allow: "nodeclient", wantSubresource: "nodeclient", wantApproval: true},
		"node without permission":    {csr: csr("rekey.io/kube-apiserver-client-kubelet", "system:node:n1", nodeRequest, nodeUsages), wantSubresource: "selfnodeclient"},
		"bootstrapper needs its own": {csr: csr("rekey.io/kube-apiserver-client-kubelet", "system:bootstrap:abc", nodeRequest, nodeUsages), allow: "selfnodeclient", wantSubresource: "nodeclient"},
		"wrong shape waits":          {csr: csr("rekey.io/kube-apiserver-client-kubelet", "system:node:n1", nodeRequest, nodeUsages[:2]), allow: "selfnodeclient"},
		"manual signer waits":        {csr: csr("rekey.io/kube-apiserver-client", "system:node:n1", nodeRequest, nodeUsages), allow: "selfnodeclient"},
		"unknown signer waits":       {csr: csr("example.org/x", "system:node:n1", nodeRequest, nodeUsages), allow: "selfnodeclient"},
		"review error retries":       {csr: csr("rekey.io/kube-apiserver-client-kubelet", "system:node:n1", nodeRequest, nodeUsages), authzErr: errors.New("webhook down"), wantSubresource: "selfnodeclient", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			signers := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			for name, mode := range map[string]certv1alpha1.ApprovalMode{
				"rekey.io:kube-apiserver-client-kubelet": certv1alpha1.ApprovalNodeClient,
				"rekey.io:kube-apiserver-client":         certv1alpha1.ApprovalManual,
			} {
				if err := signers.Add(&certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certv1alpha1.SignerSpec{Approval: certv1alpha1.SignerApproval{Mode: mode}}}); err != nil {
					t.Fatal(err)
				}
			}
			var asked []authorizer.Attributes
			authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				asked = append(asked, a)
				if tc.authzErr != nil {
					return authorizer.DecisionNoOpinion, "", tc.authzErr
				}
				if a.GetSubresource() == tc.allow && a.GetVerb() == "create" && a.GetResource() == "certificatesigningrequests" {
					return authorizer.DecisionAllow, "", nil
				}
				return authorizer.DecisionNoOpinion, "no", nil
			})
			client := fake.NewSimpleClientset(tc.csr)
			c := &Controller{client: client, signers: certlisters.NewSignerLister(signers), authz: authz,
				events: record.NewFakeRecorder(100), clock: clocktesting.NewFakePassiveClock(time.Unix(1000, 0))}

			err := c.Handle(context.Background(), tc.csr)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantSubresource == "" && len(asked) != 0 {
				t.Fatalf("a SubjectAccessReview was asked: %v", asked)
			}
			if tc.wantSubresource != "" && (len(asked) != 1 || asked[0].GetSubresource() != tc.wantSubresource || asked[0].GetUser().GetName() != tc.csr.Spec.Username) {
				t.Fatalf("reviews %v, want one for %s as %s", asked, tc.wantSubresource, tc.csr.Spec.Username)
			}
			actions := client.Actions()
			if !tc.wantApproval {
				if len(actions) != 0 {
					t.Fatalf("actions %v, want none", actions)
				}
				return
			}
			if len(actions) != 1 || actions[0].GetVerb() != "update" || actions[0].GetSubresource() != "approval" {
				t.Fatalf("actions %v, want one update of /approval", actions)
			}
			approved := actions[0].(k8stesting.UpdateAction).GetObject().(*certv1alpha1.CertificateSigningRequest)
			if c := approved.Status.Conditions[0]; c.Type != certv1alpha1.CertificateApproved || c.Reason != issuer.ReasonAutoApproved || !strings.Contains(c.Message, tc.wantSubresource) {
				t.Fatalf("condition %+v", c)
			}
			if len(tc.csr.Status.Conditions) != 0 {
				t.Fatal("Handle modified the lister's copy")
			}
		})
	}
}
