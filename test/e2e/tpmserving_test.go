package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/agent"
	"rekey.io/rekey/pkg/agent/tpmnode"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

const tpmServingSigner = "rekey.io/kubelet-serving-tpm"

// TestTPMServingNamesOnlyTheNodesAddresses: attestation proves which
// machine asks, not which names are its. A node with a genuine TPM and
// fresh evidence, asking as itself (system:node:NAME) for a
// rekey.io/kubelet-serving-tpm certificate naming kubernetes.default.svc
// or kube-apiserver's Service IP (both written into its own Node status,
// as a hostile node would), is refused with Attested=False AddressRefused
// before its evidence is verified: the same evidence then gets its own
// addresses certified, so the refusals spent no challenge.
func TestTPMServingNamesOnlyTheNodesAddresses(t *testing.T) {
	ctx := context.Background()
	const nodeName = "tpm-serving-n"
	kubeSvc, err := cluster.Admin.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	makeNode(t, nodeName,
		corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.1.4.7"},
		corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "tpm-serving-n.nodes.example"},
		corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "kubernetes.default.svc"},
		corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: kubeSvc.Spec.ClusterIP},
		corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "127.0.0.1"})

	tpm := framework.StartSWTPM(t)
	root, intermediate := framework.SWTPMRoots(t)
	tpmPolicy(t, "e2e-tpm-serving", root, intermediate, readPCRs(t, tpm))
	node, _ := userClient(t, "system:node:"+nodeName, "system:nodes")
	attestor := &agent.TPMAttestor{Open: func() (*tpmnode.Device, error) { return tpmnode.Open(tpm) }, Node: nodeName, Policy: "e2e-tpm-serving", Dir: t.TempDir()}

	// One key, one answer to one challenge; requests of that key differ in
	// the names they ask for.
	key := fixtures.NewKey(t)
	servingRequest := func(name string, dns []string, ips ...string) *certv1alpha1.CertificateSigningRequest {
		var parsed []net.IP
		for _, ip := range ips {
			parsed = append(parsed, net.ParseIP(ip))
		}
		tmpl := agent.ServingTemplate(tpmServingSigner, nodeName, dns, parsed)
		csrPEM, err := tmpl.CSR(key)
		if err != nil {
			t.Fatal(err)
		}
		return &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certv1alpha1.CertificateSigningRequestSpec{Request: csrPEM, SignerName: tpmServingSigner, Usages: tmpl.Usages}}
	}
	first := servingRequest("unused", []string{"tpm-serving-n.nodes.example"})
	request, err := attestor.Request(ctx, node, first.Spec.Request, key.Public())
	if err != nil {
		t.Fatal(err)
	}
	evidence := request[bytes.Index(request, []byte("-----BEGIN KUBELET")):]
	withEvidence := func(csr *certv1alpha1.CertificateSigningRequest) *certv1alpha1.CertificateSigningRequest {
		csr.Spec.Request = append(append([]byte(nil), csr.Spec.Request...), evidence...)
		return csr
	}

	for _, tc := range []struct {
		csr  *certv1alpha1.CertificateSigningRequest
		rule string
	}{
		{servingRequest("tpm-serving-kubernetes", []string{"kubernetes.default.svc"}), "kube-apiserver"},
		{servingRequest("tpm-serving-service-ip", nil, kubeSvc.Spec.ClusterIP), "Service default/kubernetes"},
		{servingRequest("tpm-serving-loopback", nil, "127.0.0.1"), "loopback"},
		{servingRequest("tpm-serving-not-its-own", []string{"tpm-serving-n.nodes.example", "evil.example"}), "not among"},
	} {
		got := create(t, node, withEvidence(tc.csr))
		requireRefusedAtCreate(t, tc.csr.Name, got, "AddressRefused")
		if c := certv1alpha1.GetCondition(got, certv1alpha1.CertificateAttested); !strings.Contains(c.Message, tc.rule) {
			t.Errorf("%s: Attested message %q does not name %q", tc.csr.Name, c.Message, tc.rule)
		}
	}

	// Its own addresses, with the same evidence: the challenge is still
	// outstanding. (A create refused because rekey has not read the Node
	// yet spends nothing either, and is retried.)
	attempt := 0
	framework.Eventually(t, settleTimeout, "a request for the node's own addresses issued in its create", func(ctx context.Context) error {
		attempt++
		got := create(t, node, withEvidence(servingRequest(fmt.Sprintf("tpm-serving-own-%d", attempt), []string{"tpm-serving-n.nodes.example"}, "10.1.4.7")))
		if len(got.Status.Certificate) == 0 {
			return fmt.Errorf("not issued in the create: %+v", got.Status.Conditions)
		}
		certs, err := validation.ParseCertificateChain(got.Status.Certificate)
		if err != nil {
			return err
		}
		if len(certs[0].DNSNames) != 1 || len(certs[0].IPAddresses) != 1 || certs[0].IPAddresses[0].String() != "10.1.4.7" {
			return fmt.Errorf("SANs %v %v", certs[0].DNSNames, certs[0].IPAddresses)
		}
		return nil
	})
}
