package issuer

import (
	"context"
	"net"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/test/fixtures"
)

// An attested node gets no name that is not its own: a request for a
// signer in Attestation mode that could authenticate a server (server auth
// or any usage, no extended usage at all, or any SAN) must pass the
// NodeServing rules before its evidence is even looked at (so a refused
// request spends no challenge), and with no host cluster to read, it is
// refused. A client request without SANs is attested as before.
func TestAtCreateAttestedServingAddresses(t *testing.T) {
	serving := []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageKeyEncipherment, certificates.UsageServerAuth}
	client := []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageKeyEncipherment, certificates.UsageClientAuth}
	req := func(t *testing.T, user string, usages []certificates.KeyUsage, dns []string, ips ...string) *certificates.CertificateSigningRequest {
		var parsed []net.IP
		for _, ip := range ips {
			parsed = append(parsed, net.ParseIP(ip))
		}
		return &certificates.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "req", UID: "uid-1"},
			Spec: certificates.CertificateSigningRequestSpec{
				SignerName: "example.com/tpm", Usages: usages, Username: user, Groups: []string{"system:nodes", "system:authenticated"},
				Request: fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}, DNSNames: dns, IPAddresses: parsed}),
			},
		}
	}
	const node = "system:node:n1"
	tests := map[string]struct {
		csr       *certificates.CertificateSigningRequest
		noCluster bool
		unsynced  bool
		extra     []any  // Nodes and Services added to hostile
		reason    string // the Attested=False reason; "" means attested and approved
		message   string
	}{
		// A namespace editor's Services do not make the node's own names
		// theirs (else a permanent Attested=False for any node).
		"its own names beside a namespace editor's Services": {csr: req(t, node, serving, []string{"n1.nodes.example.com", "n1"}, "10.0.0.5"),
			extra: []any{
				&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "team-z", Name: "x"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "n1.nodes.example.com"}},
				&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "team-z", Name: "n1"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.5.6", ClusterIPs: []string{"10.96.5.6"}}},
			}},
		"its IP in a Service's externalIPs": {csr: req(t, node, serving, nil, "10.0.0.5"), reason: ReasonAddressRefused, message: "spec.externalIPs of Service team-z/y",
			extra: []any{&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "team-z", Name: "y"}, Spec: corev1.ServiceSpec{ExternalIPs: []string{"10.0.0.5"}}}}},
		"its own addresses":                 {csr: req(t, node, serving, []string{"n1.nodes.example.com"}, "10.0.0.5")},
		"a client request without SANs":     {csr: req(t, node, client, nil)},
		"kubernetes.default.svc":            {csr: req(t, node, serving, []string{"kubernetes.default.svc"}), reason: ReasonAddressRefused, message: "kube-apiserver"},
		"kube-apiserver's Service IP":       {csr: req(t, node, serving, nil, "10.96.0.1"), reason: ReasonAddressRefused, message: "Service default/kubernetes"},
		"kube-apiserver's endpoint":         {csr: req(t, node, serving, nil, "10.0.0.1"), reason: ReasonAddressRefused, message: "kube-apiserver"},
		"a Service's ClusterIP":             {csr: req(t, node, serving, nil, "10.96.0.20"), reason: ReasonAddressRefused, message: "Service team-a/web"},
		"another node's IP":                 {csr: req(t, node, serving, nil, "10.0.0.6"), reason: ReasonAddressRefused, message: "Node n2"},
		"loopback":                          {csr: req(t, node, serving, nil, "127.0.0.1"), reason: ReasonAddressRefused, message: "loopback"},
		"an address not among the Node's":   {csr: req(t, node, serving, []string{"evil.example.com"}), reason: ReasonAddressRefused, message: "not among"},
		"a client usage with a SAN":         {csr: req(t, node, client, []string{"web.team-a"}), reason: ReasonAddressRefused, message: `lack "server auth"`},
		"usage any, no SAN":                 {csr: req(t, node, []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageAny}, nil), reason: ReasonAddressRefused},
		"no extended usage, no SAN":         {csr: req(t, node, []certificates.KeyUsage{certificates.UsageDigitalSignature}, nil), reason: ReasonAddressRefused},
		"server auth asked by another user": {csr: req(t, "system:bootstrap:abcdef", serving, []string{"n1.nodes.example.com"}), reason: ReasonAddressRefused, message: "not a node"},
		"no host cluster":                   {csr: req(t, node, serving, []string{"n1.nodes.example.com"}), noCluster: true, reason: ReasonNoHostCluster, message: "--kubeconfig"},
		"host cluster not read yet":         {csr: req(t, node, serving, []string{"n1.nodes.example.com"}), unsynced: true, reason: ReasonHostClusterUnread},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, true)
			a := &attestor{out: &Attestation{Passed: true, Decision: Decision{Reason: "TPMQuoteVerified", Message: "m"}}}
			f.sync.Attestor = a
			if !tc.noCluster {
				view := hostile(t, tc.extra...)
				if tc.unsynced {
					view.Synced = func() bool { return false }
				}
				f.sync.Cluster = view
			}
			out, err := f.sync.AtCreate(context.Background(), tc.csr)
			if err != nil {
				t.Fatal(err)
			}
			if tc.reason == "" {
				if a.calls != 1 || out.Approval == nil || out.Attestation == nil || !out.Attestation.Passed {
					t.Fatalf("want attested and approved, got %+v (%d attestations)", out, a.calls)
				}
				return
			}
			if a.calls != 0 {
				t.Fatalf("the evidence was verified (%d calls): a refused request must not spend the node's challenge", a.calls)
			}
			if out.Approval != nil || out.Certificate != nil || out.Attestation == nil || out.Attestation.Passed ||
				out.Attestation.Reason != tc.reason || !strings.Contains(out.Attestation.Message, tc.message) {
				t.Fatalf("want Attested=False %s containing %q, got %+v %+v", tc.reason, tc.message, out, out.Attestation)
			}
		})
	}
}
