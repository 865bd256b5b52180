package integration

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

var nodeClientUsages = []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth}

func nodeClientRequest(t *testing.T, name, node string, orgs ...string) *certv1alpha1.CertificateSigningRequest {
	if orgs == nil {
		orgs = []string{"system:nodes"}
	}
	return requestFor(t, name, "rekey.io/kube-apiserver-client-kubelet", fixtures.CSROptions{CommonName: "system:node:" + node, Organizations: orgs}, nodeClientUsages...)
}

// TestNodeClientSubresources: a create through
// certificatesigningrequests/NAME/selfnodeclient (or nodeclient) is
// authorized as that permission by the server's authorization, and
// answered approved and signed; whatever that permission does not cover is
// refused with the reason, and nothing is stored or signed.
func TestNodeClientSubresources(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	ctx := context.Background()
	ca := caOf(t, srv.Client, "rekey.io-kube-apiserver-client-kubelet")
	node, _ := srv.ClientFor(t, "system:node:n1", "system:nodes")
	requests := node.CertificatesV1alpha1().CertificateSigningRequests()

	// A fresh server loads its Signers and CA keys a moment after it
	// starts: until then the subresource answers 503 (retry) or approves
	// without a certificate.
	var issued *certv1alpha1.CertificateSigningRequest
	i := 0
	framework.Eventually(t, 30*time.Second, "a selfnodeclient create signed in its write", func(ctx context.Context) error {
		out, err := requests.CreateSelfNodeClient(ctx, fmt.Sprintf("n1-%d", i), nodeClientRequest(t, "", "n1"), metav1.CreateOptions{})
		i++
		switch {
		case apierrors.IsServiceUnavailable(err):
			return err
		case err != nil:
			return framework.Permanent(fmt.Errorf("selfnodeclient create: %w", err))
		case !hasCondition(out, certv1alpha1.CertificateApproved):
			return framework.Permanent(fmt.Errorf("selfnodeclient create answered without approval: %+v", out.Status))
		case len(out.Status.Certificate) == 0:
			return fmt.Errorf("approved without a certificate: %s", statusOf(out))
		}
		issued = out
		return nil
	})
	if issued.Spec.Username != "system:node:n1" {
		t.Fatalf("requester %q, want the authenticated node", issued.Spec.Username)
	}
	for _, c := range issued.Status.Conditions {
		if c.Type == certv1alpha1.CertificateApproved && (c.Reason != "AutoApproved" || !strings.Contains(c.Message, "authorized as create certificatesigningrequests/selfnodeclient")) {
			t.Fatalf("Approved condition %+v", c)
		}
	}
	certs, err := validation.ParseCertificateChain(issued.Status.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	verifyChain(t, certs[0], ca, x509.ExtKeyUsageClientAuth)
	if certs[0].Subject.CommonName != "system:node:n1" {
		t.Fatalf("certificate for %q", certs[0].Subject.CommonName)
	}
	if records := issuanceRecords(t, srv, string(issued.UID)); len(records) != 1 {
		t.Fatalf("issuance records of the request: %+v", records)
	}
	stored, err := srv.Client.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, issued.Name, metav1.GetOptions{})
	if err != nil || stored.ResourceVersion != issued.ResourceVersion || len(stored.Status.Certificate) == 0 {
		t.Fatalf("stored request %v: %+v, want the create's own write with the certificate", err, stored)
	}
	recordsBefore := len(issuanceRecords(t, srv, ""))

	bob, _ := srv.ClientFor(t, "bob", "devs")
	bootstrapper, _ := srv.ClientFor(t, "system:bootstrap:abcdef", "system:bootstrappers")
	for _, tc := range []struct {
		name   string
		create func() error
		want   func(error) bool
		reason string
	}{
		{"a user without selfnodeclient", func() error {
			_, err := bob.CertificatesV1alpha1().CertificateSigningRequests().CreateSelfNodeClient(ctx, "bob-1", nodeClientRequest(t, "bob-1", "bob"), metav1.CreateOptions{})
			return err
		}, apierrors.IsForbidden, "selfnodeclient"},
		{"another node's certificate", func() error {
			_, err := requests.CreateSelfNodeClient(ctx, "n2-1", nodeClientRequest(t, "n2-1", "n2"), metav1.CreateOptions{})
			return err
		}, apierrors.IsBadRequest, "covers only your own node"},
		{"a signer in Manual mode", func() error {
			_, err := requests.CreateSelfNodeClient(ctx, "manual-1", requestFor(t, "manual-1", "rekey.io/kube-apiserver-client",
				fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}}, nodeClientUsages...), metav1.CreateOptions{})
			return err
		}, apierrors.IsBadRequest, "approves in Manual mode"},
		{"not shaped like a node client request", func() error {
			_, err := requests.CreateSelfNodeClient(ctx, "shape-1", nodeClientRequest(t, "shape-1", "n1", "system:nodes", "admins"), metav1.CreateOptions{})
			return err
		}, apierrors.IsBadRequest, "must be a node client request"},
		{"a system:masters subject (admission runs on this path)", func() error {
			_, err := requests.CreateSelfNodeClient(ctx, "masters-1", nodeClientRequest(t, "masters-1", "n1", "system:masters"), metav1.CreateOptions{})
			return err
		}, apierrors.IsForbidden, "system:masters"},
		{"a name that is not the path's", func() error {
			_, err := requests.CreateSelfNodeClient(ctx, "path-name", nodeClientRequest(t, "body-name", "n1"), metav1.CreateOptions{})
			return err
		}, apierrors.IsBadRequest, "must be the name in the path"},
		{"a bootstrapper without nodeclient's counterpart", func() error {
			_, err := bootstrapper.CertificatesV1alpha1().CertificateSigningRequests().CreateSelfNodeClient(ctx, "boot-1", nodeClientRequest(t, "boot-1", "n3"), metav1.CreateOptions{})
			return err
		}, apierrors.IsForbidden, "selfnodeclient"},
	} {
		err := tc.create()
		if !tc.want(err) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%s: got %v, want an error saying %q", tc.name, err, tc.reason)
		}
	}
	list, err := srv.Client.CertificatesV1alpha1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, csr := range list.Items {
		if !strings.HasPrefix(csr.Name, "n1-") {
			t.Errorf("refused create stored %s", csr.Name)
		}
	}
	if records := issuanceRecords(t, srv, ""); len(records) != recordsBefore {
		t.Errorf("refused creates signed: %d records, %d before", len(records), recordsBefore)
	}

	// A bootstrap identity gets a new node's first certificate through
	// nodeclient.
	first, err := bootstrapper.CertificatesV1alpha1().CertificateSigningRequests().CreateNodeClient(ctx, "n3-1", nodeClientRequest(t, "n3-1", "n3"), metav1.CreateOptions{})
	if err != nil || len(first.Status.Certificate) == 0 || first.Spec.Username != "system:bootstrap:abcdef" {
		t.Fatalf("nodeclient create: %v %+v", err, first)
	}
	mainCreateStillReviews(t, node)
}

// mainCreateStillReviews: the main resource's create is unchanged: a
// node's request there is approved after a SubjectAccessReview, as before.
func mainCreateStillReviews(t *testing.T, node clientset.Interface) {
	t.Helper()
	out, err := node.CertificatesV1alpha1().CertificateSigningRequests().Create(context.Background(), nodeClientRequest(t, "n1-main", "n1"), metav1.CreateOptions{})
	if err != nil || !hasCondition(out, certv1alpha1.CertificateApproved) {
		t.Fatalf("main create: %v %+v", err, out)
	}
	for _, c := range out.Status.Conditions {
		if c.Type == certv1alpha1.CertificateApproved && !strings.Contains(c.Message, "SubjectAccessReview") {
			t.Fatalf("main create approved by %q, want a review", c.Message)
		}
	}
}

// TestApproverTakesUpWhatWaitsWhenASignerStartsApprovingNodes: the
// approver controller watches only the pending requests of the signers
// that approve without a person. A node's request for a signer switched to
// Manual waits for a person; once the signer approves nodes again, the
// controller's informer for it lists that request and approves it (with a
// SubjectAccessReview, as at create), and the approval write signs it.
func TestApproverTakesUpWhatWaitsWhenASignerStartsApprovingNodes(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	signers := srv.Client.CertificatesV1alpha1().Signers()
	const signerObject = "rekey.io:kube-apiserver-client-kubelet"
	// The signer controller writes the Signer's status meanwhile (its CA
	// getting its key): an update that meets one is retried.
	setMode := func(mode certv1alpha1.ApprovalMode) {
		t.Helper()
		framework.Eventually(t, 30*time.Second, "setting the approval mode to "+string(mode), func(ctx context.Context) error {
			s, err := signers.Get(ctx, signerObject, metav1.GetOptions{})
			if err != nil {
				return framework.Permanent(err)
			}
			s.Spec.Approval.Mode = mode
			_, err = signers.Update(ctx, s, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				return err
			}
			return framework.Permanent(err)
		})
	}
	node, _ := srv.ClientFor(t, "system:node:n1", "system:nodes")
	// Wait until the server has its Signers and keys: a node's create
	// through selfnodeclient is signed in its write.
	ready := 0
	framework.Eventually(t, 30*time.Second, "a selfnodeclient create signed in its write", func(ctx context.Context) error {
		out, err := node.CertificatesV1alpha1().CertificateSigningRequests().CreateSelfNodeClient(ctx, fmt.Sprintf("ready-%d", ready), nodeClientRequest(t, "", "n1"), metav1.CreateOptions{})
		ready++
		switch {
		case apierrors.IsServiceUnavailable(err):
			return err
		case err != nil:
			return framework.Permanent(err)
		case len(out.Status.Certificate) == 0:
			return fmt.Errorf("not signed in its write: %s", statusOf(out))
		}
		return nil
	})
	setMode(certv1alpha1.ApprovalManual)

	// The create's own decision follows the Signer as the server sees it:
	// retry until a create is stored pending under Manual.
	var waiting *certv1alpha1.CertificateSigningRequest
	tries := 0
	framework.Eventually(t, 30*time.Second, "a create stored pending under Manual (the Signer stays in NodeClient mode for the server)", func(ctx context.Context) error {
		out, err := node.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, nodeClientRequest(t, fmt.Sprintf("waits-%d", tries), "n1"), metav1.CreateOptions{})
		tries++
		if err != nil {
			return framework.Permanent(err)
		}
		if len(out.Status.Conditions) > 0 {
			return fmt.Errorf("decided at create: %s", statusOf(out))
		}
		waiting = out
		return nil
	})

	setMode(certv1alpha1.ApprovalNodeClient)
	issued := waitFor(t, srv.Client, waiting.Name, 30*time.Second, func(csr *certv1alpha1.CertificateSigningRequest) bool {
		return len(csr.Status.Certificate) > 0
	})
	approved := false
	for _, c := range issued.Status.Conditions {
		if c.Type == certv1alpha1.CertificateApproved && c.Reason == "AutoApproved" && strings.Contains(c.Message, "selfnodeclient") {
			approved = true
		}
	}
	if !approved {
		t.Fatalf("conditions %+v, want AutoApproved after a SubjectAccessReview of selfnodeclient", issued.Status.Conditions)
	}
}
