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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
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
	framework.Eventually(t, settleTimeout, "a request for e2e-serving's own addresses issued in its create", func(ctx context.Context) error {
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
		framework.Eventually(t, settleTimeout, "the NotAutoApproved event of "+name, func(ctx context.Context) error {
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

// A node writes its own Node status (through kube-apiserver's Node
// authorizer and NodeRestriction, as a kubelet does), and lists there
// addresses that are not its own: another node's IP and name, a Service's
// ClusterIP and in-cluster names, a load balancer's hostname, loopback,
// localhost, the metadata address, an IP written as a DNS name. Its own
// addresses are certified; none of the others is: each request stays
// pending with an event naming the rule.
func TestNodeServingRefusesWhatANodeWritesAboutItself(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e-team-a"}}
	if _, err := cluster.Admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Admin.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	web, err := cluster.Admin.CoreV1().Services(ns.Name).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 443}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb-e2e.elb.example.com"}}
	if _, err := cluster.Admin.CoreV1().Services(ns.Name).UpdateStatus(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	makeNode(t, "e2e-honest", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.1.3.4"}, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "e2e-honest"})
	makeNode(t, "e2e-liar")

	// The node writes its status itself, with its own credential.
	node, nodeKubeconfig := userClient(t, "system:node:e2e-liar", "system:nodes")
	cfg, err := clientcmd.BuildConfigFromFlags("", nodeKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	asNode := kubernetes.NewForConfigOrDie(cfg)
	claimed := map[string]corev1.NodeAddressType{
		"10.1.3.9": corev1.NodeInternalIP, "e2e-liar": corev1.NodeHostName, "e2e-liar.nodes.example": corev1.NodeInternalDNS, // its own
		"10.1.3.4": corev1.NodeInternalIP, "e2e-honest": corev1.NodeHostName, // the other node's
		web.Spec.ClusterIP: corev1.NodeExternalIP, "127.0.0.2": corev1.NodeInternalIP, "169.254.169.254": corev1.NodeInternalIP,
		"kubernetes.default.svc": corev1.NodeInternalDNS, "web": corev1.NodeInternalDNS, "web.e2e-team-a": corev1.NodeInternalDNS,
		"lb-e2e.elb.example.com": corev1.NodeExternalDNS, "localhost": corev1.NodeInternalDNS, "10.1.3.8": corev1.NodeInternalDNS,
	}
	framework.Eventually(t, settleTimeout, "e2e-liar writing its own Node status", func(ctx context.Context) error {
		n, err := asNode.CoreV1().Nodes().Get(ctx, "e2e-liar", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Addresses = nil
		for a, typ := range claimed {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: typ, Address: a})
		}
		_, err = asNode.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})

	// Its own addresses: certified in the create, once rekey has read the
	// status.
	attempt := 0
	framework.Eventually(t, settleTimeout, "a request for e2e-liar's own addresses issued in its create", func(ctx context.Context) error {
		attempt++
		csr := create(t, node, servingCSR(t, fmt.Sprintf("liar-own-%d", attempt), "e2e-liar", []string{"e2e-liar", "e2e-liar.nodes.example"}, "10.1.3.9"))
		if len(csr.Status.Certificate) == 0 {
			return fmt.Errorf("not issued in the create: %+v", csr.Status.Conditions)
		}
		return nil
	})

	refused := map[string]struct {
		dns    []string
		ips    []string
		reason string
	}{
		"liar-other-ip":        {ips: []string{"10.1.3.4"}, reason: "also claimed by Node e2e-honest"},
		"liar-other-name":      {dns: []string{"e2e-honest"}, reason: "single-label"},
		"liar-service-ip":      {ips: []string{web.Spec.ClusterIP}, reason: "Service e2e-team-a/web"},
		"liar-loopback":        {ips: []string{"127.0.0.2"}, reason: "loopback"},
		"liar-metadata":        {ips: []string{"169.254.169.254"}, reason: "link-local"},
		"liar-kubernetes":      {dns: []string{"kubernetes.default.svc"}, reason: "kube-apiserver"},
		"liar-service-short":   {dns: []string{"web"}, reason: "Service e2e-team-a/web"},
		"liar-service-ns":      {dns: []string{"web.e2e-team-a"}, reason: "Service e2e-team-a/web"},
		"liar-lb-hostname":     {dns: []string{"lb-e2e.elb.example.com"}, reason: "load-balancer hostname of Service e2e-team-a/web"},
		"liar-localhost":       {dns: []string{"localhost"}, reason: "local host"},
		"liar-ip-as-dns-name":  {dns: []string{"10.1.3.8"}, reason: "IP address written as a DNS name"},
		"liar-one-bad-of-many": {dns: []string{"e2e-liar", "web.e2e-team-a"}, ips: []string{"10.1.3.9"}, reason: "Service e2e-team-a/web"},
	}
	for name, tc := range refused {
		got := create(t, node, servingCSR(t, name, "e2e-liar", tc.dns, tc.ips...))
		if len(got.Status.Conditions) != 0 || len(got.Status.Certificate) != 0 {
			t.Errorf("%s was decided at create: %+v (certificate: %t)", name, got.Status.Conditions, len(got.Status.Certificate) > 0)
		}
	}
	for name, tc := range refused {
		framework.Eventually(t, settleTimeout, "the NotAutoApproved event of "+name, func(ctx context.Context) error {
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
		if err != nil || len(csr.Status.Conditions) != 0 || len(csr.Status.Certificate) != 0 {
			t.Errorf("%s: %v %+v, want pending", name, err, csr.Status)
		}
	}
}
