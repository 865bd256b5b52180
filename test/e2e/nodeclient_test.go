package e2e

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/registry/printers"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

const kubeletClientSigner = "rekey.io/kube-apiserver-client-kubelet"

func nodeCSR(t *testing.T, name, node string) *certv1alpha1.CertificateSigningRequest {
	return &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request:    fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:node:" + node, Organizations: []string{"system:nodes"}}),
			SignerName: kubeletClientSigner,
			Usages:     []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth},
		},
	}
}

// A node that RBAC lets create certificatesigningrequests/selfnodeclient
// gets its own client certificate with no human step, in the response to
// its create: the review runs in the create, which is stored approved and
// signed. Both servers' audit logs name the node as the creator.
func TestNodeClientRequestIsAutoApprovedAndSigned(t *testing.T) {
	node, _ := userClient(t, "system:node:e2e-node-1", "system:nodes")
	csr := create(t, node, nodeCSR(t, "node-1-client", "e2e-node-1"))
	if len(csr.Status.Certificate) == 0 {
		t.Fatalf("the create response has no certificate: %+v", csr.Status)
	}
	var approved *certv1alpha1.CertificateSigningRequestCondition
	for i := range csr.Status.Conditions {
		if csr.Status.Conditions[i].Type == certv1alpha1.CertificateApproved {
			approved = &csr.Status.Conditions[i]
		}
	}
	if approved == nil || approved.Reason != "AutoApproved" || !strings.Contains(approved.Message, "selfnodeclient") {
		t.Fatalf("not auto-approved after the selfnodeclient review: %+v", csr.Status.Conditions)
	}
	for _, log := range []string{kubeAuditLog, rekeyAuditLog} {
		waitForAuditEvent(t, log, "create", "node-1-client", "system:node:e2e-node-1")
	}
	certs, err := validation.ParseCertificateChain(csr.Status.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(context.Background(), "rekey.io-kube-apiserver-client-kubelet", metav1.GetOptions{})
	if err != nil || ca.Status.Current == nil {
		t.Fatalf("CA: %v", err)
	}
	caCert, err := authority.ParseCertificatePEM(ca.Status.Current.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("node certificate does not chain to the kubelet client CA: %v", err)
	}
	if certs[0].Subject.CommonName != "system:node:e2e-node-1" {
		t.Fatalf("subject = %v", certs[0].Subject)
	}
	// Both decisions of the create are events on the request in the host
	// cluster (package csrevents), the Issued one naming the serial.
	for reason, want := range map[string]string{"Approved": "AutoApproved: ", "Issued": "serial " + printers.SerialHex(certs[0].SerialNumber)} {
		framework.Eventually(t, settleTimeout, "the "+reason+" event of node-1-client", func(ctx context.Context) error {
			events, err := cluster.Admin.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=node-1-client,reason=" + reason})
			if err != nil {
				return err
			}
			for _, e := range events.Items {
				if strings.Contains(e.Message, want) && e.InvolvedObject.UID == csr.UID {
					return nil
				}
			}
			return fmt.Errorf("no %s event saying %q: %+v", reason, want, events.Items)
		})
	}
	// kubectl describe finds them (cluster-scoped objects' events are in
	// namespace default).
	out, errOut, err := framework.RunKubectl(t, cluster.AdminKubeconfig, nil, "describe", "rcsr", "node-1-client")
	_, described, _ := strings.Cut(out, "Events:")
	if err != nil || !strings.Contains(described, "Approved") || !strings.Contains(described, "Issued") || !strings.Contains(described, "serial "+printers.SerialHex(certs[0].SerialNumber)) {
		t.Fatalf("kubectl describe rcsr node-1-client does not list the events: %v\n%s%s", err, out, errOut)
	}
}

// A requester without the selfnodeclient/nodeclient permission stays
// pending: nothing else is ever auto-approved.
func TestNodeClientRequestWithoutPermissionStaysPending(t *testing.T) {
	rogue, _ := userClient(t, "system:node:rogue", "rogue-nodes")
	bind(t, "system:node:rogue", "rekey:requester")
	if got := create(t, rogue, nodeCSR(t, "rogue-client", "rogue")); len(got.Status.Conditions) != 0 || len(got.Status.Certificate) != 0 {
		t.Fatalf("the create of a request without permission was decided: %+v", got.Status)
	}
	// A permitted node's request made afterwards proves the approver ran.
	node, _ := userClient(t, "system:node:e2e-node-2", "system:nodes")
	create(t, node, nodeCSR(t, "node-2-client", "e2e-node-2"))
	framework.Eventually(t, 60*time.Second, "the permitted node's request issued", func(ctx context.Context) error {
		csr, err := cluster.RekeyAdmin.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, "node-2-client", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(csr.Status.Certificate) == 0 {
			return fmt.Errorf("no certificate: %+v", csr.Status.Conditions)
		}
		return nil
	})
	framework.Stays(t, 2*time.Second, "the request without permission left pending", func(ctx context.Context) error {
		csr, err := cluster.RekeyAdmin.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, "rogue-client", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(csr.Status.Conditions) != 0 || len(csr.Status.Certificate) != 0 {
			return fmt.Errorf("request without permission was acted on: %+v", csr.Status)
		}
		return nil
	})
}

// TestSelfNodeClientPathThroughTheAggregator: a node posting to
// certificatesigningrequests/NAME/selfnodeclient is authorized for that
// permission by kube-apiserver and by rekey, and gets its certificate in
// the response; both audit logs name the node. A requester without the
// permission is refused by kube-apiserver's RBAC, and nothing is stored.
func TestSelfNodeClientPathThroughTheAggregator(t *testing.T) {
	node, _ := userClient(t, "system:node:e2e-node-3", "system:nodes")
	var out *certv1alpha1.CertificateSigningRequest
	framework.Eventually(t, settleTimeout, "e2e-node-3 creating node-3-client through selfnodeclient", func(ctx context.Context) error {
		var err error
		out, err = node.CertificatesV1alpha1().CertificateSigningRequests().CreateSelfNodeClient(context.Background(), "node-3-client", nodeCSR(t, "node-3-client", "e2e-node-3"), metav1.CreateOptions{})
		return err
	})
	if len(out.Status.Certificate) == 0 || out.Spec.Username != "system:node:e2e-node-3" {
		t.Fatalf("selfnodeclient create: %+v", out)
	}
	for _, c := range out.Status.Conditions {
		if c.Type == certv1alpha1.CertificateApproved && !strings.Contains(c.Message, "authorized as create certificatesigningrequests/selfnodeclient") {
			t.Fatalf("Approved condition %+v", c)
		}
	}
	for _, log := range []string{kubeAuditLog, rekeyAuditLog} {
		waitForAuditEvent(t, log, "create", "node-3-client", "system:node:e2e-node-3")
	}

	rogue, _ := userClient(t, "system:node:rogue-3", "rogue-nodes")
	bind(t, "system:node:rogue-3", "rekey:requester")
	_, err := rogue.CertificatesV1alpha1().CertificateSigningRequests().CreateSelfNodeClient(context.Background(), "rogue-3-client", nodeCSR(t, "rogue-3-client", "rogue-3"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("a requester without selfnodeclient: %v, want 403", err)
	}
	if _, err := cluster.RekeyAdmin.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), "rogue-3-client", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused request was stored: %v", err)
	}
}

// waitForAuditEvent waits for a ResponseComplete event of verb on the named
// request by user in an audit log. kube-apiserver does not decode what it
// proxies to rekey, so its events of a create carry no name; the user
// (one per test) tells them apart.
func waitForAuditEvent(t *testing.T, log, verb, name, user string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, fmt.Sprintf("%s: a %s of %s by %s", log, verb, name, user), func(context.Context) error {
		data, err := os.ReadFile(log)
		if err != nil {
			return err
		}
		lines := strings.Split(string(data), "\n")
		for _, line := range lines {
			var ev auditv1.Event
			if json.Unmarshal([]byte(line), &ev) != nil || ev.ObjectRef == nil {
				continue
			}
			if ev.Stage == auditv1.StageResponseComplete && ev.Verb == verb && ev.ObjectRef.Resource == "certificatesigningrequests" &&
				ev.ObjectRef.APIGroup == "certificates.rekey.io" && (ev.ObjectRef.Name == name || ev.ObjectRef.Name == "") && ev.User.Username == user &&
				ev.ResponseStatus != nil && ev.ResponseStatus.Code == 201 {
				return nil
			}
		}
		return fmt.Errorf("none among %d lines", len(lines))
	})
}

// Nodes joining with one bootstrap token ask for their first certificates
// through certificatesigningrequests/NAME/nodeclient. kube-apiserver
// authorizes each create before forwarding it; rekey authorizes it again,
// asking the cluster about the permission for any name, which its cache
// answers after the first node: the burst costs rekey one review, not one
// per node. A grant restricted to names still works for those names (rekey
// then asks about the name), and refuses the others.
func TestNodeClientBootstrapIsReviewedOnce(t *testing.T) {
	ctx := context.Background()
	bootstrap, _ := userClient(t, "system:bootstrap:e2eboot", "system:bootstrappers")
	csrs := bootstrap.CertificatesV1alpha1().CertificateSigningRequests()
	// The first create waits for RBAC and the Signer, and fills the cache.
	framework.Eventually(t, settleTimeout, "the first bootstrap create", func(ctx context.Context) error {
		_, err := csrs.CreateNodeClient(ctx, "boot-first", nodeCSR(t, "boot-first", "e2e-boot-first"), metav1.CreateOptions{})
		return err
	})
	before := delegatedReviews(t)
	const nodes = 20
	for i := 0; i < nodes; i++ {
		name := fmt.Sprintf("boot-%02d", i)
		out, err := csrs.CreateNodeClient(ctx, name, nodeCSR(t, name, "e2e-"+name), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		if len(out.Status.Certificate) == 0 || out.Spec.Username != "system:bootstrap:e2eboot" {
			t.Fatalf("node %d: no certificate in the response, or not the bootstrap identity: %+v", i, out.Status)
		}
	}
	// Other requests (controllers) may ask meanwhile; one review per node
	// would be at least 20.
	if asked := delegatedReviews(t) - before; asked >= nodes/2 {
		t.Fatalf("rekey asked the cluster %d times for %d bootstrap creates", asked, nodes)
	}

	// A grant for one name only.
	clusterRole(t, "e2e-nodeclient-one-name", rbacv1.PolicyRule{
		APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"certificatesigningrequests/nodeclient"},
		Verbs: []string{"create"}, ResourceNames: []string{"named-ok"},
	})
	named, _ := userClient(t, "system:bootstrap:e2enamed", "e2e-named-bootstrappers")
	bind(t, "system:bootstrap:e2enamed", "rekey:requester", "e2e-nodeclient-one-name")
	var out *certv1alpha1.CertificateSigningRequest
	framework.Eventually(t, settleTimeout, "creating named-ok through nodeclient", func(ctx context.Context) error {
		var err error
		out, err = named.CertificatesV1alpha1().CertificateSigningRequests().CreateNodeClient(ctx, "named-ok", nodeCSR(t, "named-ok", "e2e-named-ok"), metav1.CreateOptions{})
		return err
	})
	if len(out.Status.Certificate) == 0 {
		t.Fatalf("the granted name: no certificate: %+v", out.Status)
	}
	_, err := named.CertificatesV1alpha1().CertificateSigningRequests().CreateNodeClient(ctx, "named-other", nodeCSR(t, "named-other", "e2e-named-other"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("a name the grant does not list: %v, want 403", err)
	}
	if _, err := cluster.RekeyAdmin.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, "named-other", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused request was stored: %v", err)
	}
}

// delegatedReviews reads, from rekey-apiserver's own /metrics, how many
// SubjectAccessReviews its delegated authorizer has sent.
func delegatedReviews(t *testing.T) int {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", cluster.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	body, err := kubernetes.NewForConfigOrDie(cluster.DirectToRekey(cfg)).Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("rekey's /metrics: %v", err)
	}
	total, found := 0, false
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_delegated_authz_request_total{") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		total, found = total+int(v), true
	}
	if !found {
		t.Fatal("rekey's /metrics has no apiserver_delegated_authz_request_total")
	}
	return total
}
