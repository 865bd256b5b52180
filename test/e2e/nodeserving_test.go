package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/test/fixtures"
)

const kubeletServingSigner = "rekey.io/kubelet-serving"

func servingCSR(t *testing.T, name, node string, dns []string, ips ...string) *certv1alpha1.CertificateSigningRequest {
	var parsed []net.IP
	for _, ip := range ips {
		parsed = append(parsed, net.ParseIP(ip))
	}
	return &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request:    fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:node:" + node, Organizations: []string{"system:nodes"}, DNSNames: dns, IPAddresses: parsed}),
			SignerName: kubeletServingSigner,
			Usages:     []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageServerAuth},
		},
	}
}

func makeNode(t *testing.T, name string, addresses ...corev1.NodeAddress) {
	t.Helper()
	ctx := context.Background()
	node, err := cluster.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err != nil {
		if node, err = cluster.Admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	node.Status.Addresses = addresses
	if _, err := cluster.Admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// A node's serving request whose addresses are its Node's is approved and
// signed in the create; one naming an address that is not its Node's,
// another node's, or kube-apiserver's stays pending, with the reason in an
// event.
func TestNodeServingApprovalIsCheckedAgainstTheNode(t *testing.T) {
	ctx := context.Background()
	kubeSvc, err := cluster.Admin.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	apiserverIP := kubeSvc.Spec.ClusterIP
	makeNode(t, "e2e-serving",
		corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.1.2.3"},
		corev1.NodeAddress{Type: corev1.NodeHostName, Address: "e2e-serving"},
		corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "e2e-serving.nodes.example"},
		// A Node can claim any address in its status; the Service's is
		// still refused.
		corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: apiserverIP})
	makeNode(t, "e2e-other", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.1.2.4"})
	node, _ := userClient(t, "system:node:e2e-serving", "system:nodes")

	attempt := 0
	eventually(t, func() error {
		// The server reads Nodes through an informer: the new Node may
		// take a moment to be seen. A create left pending is retried
		// under a new name.
		attempt++
		name := fmt.Sprintf("serving-good-%d", attempt)
		csr := create(t, node, servingCSR(t, name, "e2e-serving", []string{"e2e-serving.nodes.example", "e2e-serving"}, "10.1.2.3"))
		if len(csr.Status.Certificate) == 0 {
			return fmt.Errorf("not issued in the create: %+v", csr.Status.Conditions)
		}
		certs, err := validation.ParseCertificateChain(csr.Status.Certificate)
		if err != nil {
			return err
		}
		if len(certs[0].IPAddresses) != 1 || certs[0].IPAddresses[0].String() != "10.1.2.3" || len(certs[0].DNSNames) != 2 {
			return fmt.Errorf("SANs %v %v", certs[0].DNSNames, certs[0].IPAddresses)
		}
		return nil
	})

	refused := map[string]struct {
		csr    *certv1alpha1.CertificateSigningRequest
		reason string
	}{
		"serving-extra-san":  {servingCSR(t, "serving-extra-san", "e2e-serving", []string{"e2e-serving", "evil.example"}, "10.1.2.3"), `"evil.example" is not among`},
		"serving-other-ip":   {servingCSR(t, "serving-other-ip", "e2e-serving", nil, "10.1.2.4"), "10.1.2.4 is not among"},
		"serving-apiserver":  {servingCSR(t, "serving-apiserver", "e2e-serving", nil, apiserverIP), "Service default/kubernetes"},
		"serving-other-node": {servingCSR(t, "serving-other-node", "e2e-other", nil, "10.1.2.4"), "common name"},
	}
	for name, tc := range refused {
		got := create(t, node, tc.csr)
		if len(got.Status.Conditions) != 0 || len(got.Status.Certificate) != 0 {
			t.Errorf("%s was decided at create: %+v", name, got.Status)
		}
	}
	for name, tc := range refused {
		eventually(t, func() error {
			events, err := cluster.Admin.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=NotAutoApproved"})
			if err != nil {
				return err
			}
			for _, e := range events.Items {
				if strings.Contains(e.Message, tc.reason) {
					return nil
				}
			}
			return fmt.Errorf("no NotAutoApproved event for %s naming %q (%d events)", name, tc.reason, len(events.Items))
		})
		csr, err := cluster.RekeyAdmin.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(csr.Status.Conditions) != 0 {
			t.Errorf("%s: %v %+v, want pending", name, err, csr.Status)
		}
	}
}
