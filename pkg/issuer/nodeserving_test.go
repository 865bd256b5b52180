package issuer

import (
	"errors"
	"net"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/test/fixtures"
)

// fakeCluster has one Node n1 (10.0.0.5, n1.nodes.example.com, n1), the
// kube-apiserver at 10.0.0.1 and a Service at 10.96.0.10.
type fakeCluster struct{ err error }

func (f fakeCluster) Node(name string) (*corev1.Node, error) {
	if f.err != nil {
		return nil, f.err
	}
	if name != "n1" {
		return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.0.5"},
		{Type: corev1.NodeExternalIP, Address: "10.0.0.1"}, // claims kube-apiserver's address
		{Type: corev1.NodeInternalIP, Address: "10.96.0.10"},
		{Type: corev1.NodeHostName, Address: "n1"},
		{Type: corev1.NodeInternalDNS, Address: "n1.nodes.example.com"},
		{Type: corev1.NodeInternalDNS, Address: "kubernetes.default.svc"},
	}}}, nil
}

func (f fakeCluster) Reserved(ip net.IP) (string, bool, error) {
	switch ip.String() {
	case "10.0.0.1":
		return "an address of kube-apiserver", true, nil
	case "10.96.0.10":
		return "an address of Service kube-system/dns", true, nil
	}
	return "", false, nil
}

func TestDecideNodeServing(t *testing.T) {
	serving := []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageServerAuth}
	type req struct {
		user   string
		groups []string
		cn     string
		org    []string
		dns    []string
		ips    []string
		usages []certv1alpha1.KeyUsage
	}
	node := req{user: "system:node:n1", groups: []string{"system:nodes", "system:authenticated"}, cn: "system:node:n1", org: []string{"system:nodes"},
		dns: []string{"n1.nodes.example.com", "n1"}, ips: []string{"10.0.0.5"}, usages: serving}
	with := func(change func(*req)) req {
		r := node
		change(&r)
		return r
	}
	tests := map[string]struct {
		req     req
		allow   *certv1alpha1.NodeServingApproval
		cluster ClusterView
		refused string // "" means approved
		err     bool
	}{
		"the node's own addresses": {req: node},
		"IP only, ECDSA usages": {req: with(func(r *req) {
			r.dns, r.usages = nil, serving[:1:1]
			r.usages = append(r.usages, certv1alpha1.UsageServerAuth)
		})},
		"not a node":              {req: with(func(r *req) { r.user = "alice" }), refused: "not a node"},
		"node name without group": {req: with(func(r *req) { r.groups = []string{"system:authenticated"} }), refused: "not a node"},
		"another node's CN":       {req: with(func(r *req) { r.cn = "system:node:n2" }), refused: "common name"},
		"extra organization":      {req: with(func(r *req) { r.org = []string{"system:nodes", "admins"} }), refused: "organization"},
		"client usage": {req: with(func(r *req) {
			r.usages = append(append([]certv1alpha1.KeyUsage(nil), serving...), certv1alpha1.UsageClientAuth)
		}), refused: "not a serving usage"},
		"no server auth":           {req: with(func(r *req) { r.usages = serving[:2] }), refused: "lack"},
		"no address":               {req: with(func(r *req) { r.dns, r.ips = nil, nil }), refused: "no address"},
		"extra DNS name":           {req: with(func(r *req) { r.dns = append(r.dns, "evil.example.com") }), refused: `"evil.example.com" is not among`},
		"another node's IP":        {req: with(func(r *req) { r.ips = []string{"10.0.0.6"} }), refused: "10.0.0.6 is not among"},
		"kube-apiserver's address": {req: with(func(r *req) { r.ips = []string{"10.0.0.1"} }), refused: "kube-apiserver"},
		"a Service's address":      {req: with(func(r *req) { r.ips = []string{"10.96.0.10"} }), refused: "Service kube-system/dns"},
		"a Service's DNS name":     {req: with(func(r *req) { r.dns = []string{"kubernetes.default.svc"} }), refused: "names a Service"},
		"Node does not exist":      {req: with(func(r *req) { r.user, r.cn = "system:node:n9", "system:node:n9" }), refused: `no Node "n9"`},
		"outside the DNS suffixes": {req: node, allow: &certv1alpha1.NodeServingApproval{AllowedDNSSuffixes: []string{".nodes.example.com"}}, refused: `"n1" is not under`},
		"inside the DNS suffixes":  {req: with(func(r *req) { r.dns = r.dns[:1] }), allow: &certv1alpha1.NodeServingApproval{AllowedDNSSuffixes: []string{".nodes.example.com"}}},
		"outside the IP prefixes":  {req: node, allow: &certv1alpha1.NodeServingApproval{AllowedIPPrefixes: []string{"192.168.0.0/16"}}, refused: "allowed prefixes"},
		"inside the IP prefixes":   {req: node, allow: &certv1alpha1.NodeServingApproval{AllowedIPPrefixes: []string{"10.0.0.0/24"}}},
		"cluster not readable":     {req: node, cluster: fakeCluster{err: errors.New("not synced")}, err: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var ips []net.IP
			for _, ip := range tc.req.ips {
				ips = append(ips, net.ParseIP(ip))
			}
			csr := &certv1alpha1.CertificateSigningRequest{
				ObjectMeta: metav1.ObjectMeta{Name: "serving"},
				Spec: certv1alpha1.CertificateSigningRequestSpec{
					SignerName: "rekey.io/kubelet-serving", Username: tc.req.user, Groups: tc.req.groups, Usages: tc.req.usages,
					Request: fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: tc.req.cn, Organizations: tc.req.org, DNSNames: tc.req.dns, IPAddresses: ips}),
				},
			}
			signer := &certv1alpha1.Signer{Spec: certv1alpha1.SignerSpec{Approval: certv1alpha1.SignerApproval{Mode: certv1alpha1.ApprovalNodeServing, NodeServing: tc.allow}}}
			cluster := tc.cluster
			if cluster == nil {
				cluster = fakeCluster{}
			}
			d, err := DecideNodeServing(cluster, signer, csr)
			var refusal *NodeServingRefusal
			switch {
			case tc.err:
				if err == nil || errors.As(err, &refusal) {
					t.Fatalf("want a read error, got %v", err)
				}
			case tc.refused != "":
				if !errors.As(err, &refusal) || !strings.Contains(refusal.Reason, tc.refused) || d != nil {
					t.Fatalf("want a refusal containing %q, got %v %v", tc.refused, d, err)
				}
			default:
				if err != nil || d == nil || d.Reason != ReasonAutoApproved || !strings.Contains(d.Message, "Node n1") {
					t.Fatalf("want approval, got %v %v", d, err)
				}
			}
		})
	}
}

func TestAutoApproveNodeServingWithoutAHostCluster(t *testing.T) {
	signer := &certv1alpha1.Signer{Spec: certv1alpha1.SignerSpec{Approval: certv1alpha1.SignerApproval{Mode: certv1alpha1.ApprovalNodeServing}}}
	d, err := AutoApprove(t.Context(), nil, nil, signer, &certv1alpha1.CertificateSigningRequest{})
	var refusal *NodeServingRefusal
	if d != nil || !errors.As(err, &refusal) || !strings.Contains(refusal.Reason, "host cluster") {
		t.Fatalf("%v %v", d, err)
	}
}
