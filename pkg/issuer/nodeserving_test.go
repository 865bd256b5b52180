package issuer

import (
	"errors"
	"net"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/test/fixtures"
)

// hostile is the host cluster of the tests, read through the real
// ListerClusterView: Node n1 is the requester and lists in its status
// every address a hostile node would (its own, and others'); Node n2 lists
// its own and one n1 also claims; kube-apiserver is at 10.0.0.1 (its
// endpoint) and 10.96.0.1 (Service default/kubernetes); Services
// kube-system/dns (10.96.0.10), team-a/web (ClusterIP 10.96.0.20,
// load balancer 203.0.113.10 and lb-1.elb.example.com, external IP
// 198.51.100.7) and team-b/db (ExternalName db.example.net). extra Nodes
// and Services are added to these.
func hostile(t *testing.T, extra ...any) *ListerClusterView {
	t.Helper()
	addrs := func(typ corev1.NodeAddressType, values ...string) []corev1.NodeAddress {
		var out []corev1.NodeAddress
		for _, v := range values {
			out = append(out, corev1.NodeAddress{Type: typ, Address: v})
		}
		return out
	}
	var n1 []corev1.NodeAddress
	n1 = append(n1, addrs(corev1.NodeInternalIP, "10.0.0.5", "10.0.0.1", "10.96.0.1", "10.96.0.10", "10.96.0.20", "10.0.0.6", "10.0.0.9",
		"127.0.0.1", "127.0.0.2", "::1", "0.0.0.0", "::", "169.254.169.254", "169.254.10.1", "fe80::1", "224.0.0.1", "ff02::1",
		"fd00:ec2::254", "100.100.100.200", "168.63.129.16", "::ffff:127.0.0.1", "64:ff9b::a9fe:a9fe", "255.255.255.255",
		"203.0.113.10", "198.51.100.7", "10.244.1.7", "2001:db8::5")...)
	n1 = append(n1, addrs(corev1.NodeHostName, "n1")...)
	n1 = append(n1, addrs(corev1.NodeInternalDNS, "n1.nodes.example.com", "N1.Nodes.Example.com.", "kubernetes", "kubernetes.default",
		"kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "KUBERNETES.DEFAULT.SVC.CLUSTER.LOCAL.", "kubernetes.example.com",
		"web", "web.team-a", "web.team-a.svc", "web.team-a.svc.cluster.local", "Web.Team-A.", "pod-0.web.team-a", "web.team-a.example.com",
		"dns", "db", "anything", "x.y.svc", "10-0-0-5.default.pod.cluster.local", "foo.cluster.local",
		"lb-1.elb.example.com", "LB-1.ELB.example.com.", "db.example.net",
		"localhost", "LOCALHOST.", "app.localhost", "localhost.localdomain", "ip6-localhost",
		"10.0.0.5", "10.0.0.1", "10.0.0.5.", "10.5", "167772165", "0x0a.0.0.5", "10.0.0.5.nip.io", "10-0-0-5.sslip.io", "::1",
		"n2", "n2.nodes.example.com", "shared.example.com", "*.nodes.example.com", "n1.nodes.example.com\x00.evil", "n1 .nodes.example.com", "n1..example.com")...)
	n2 := append(addrs(corev1.NodeInternalIP, "10.0.0.6", "10.0.0.9"), addrs(corev1.NodeInternalDNS, "n2.nodes.example.com", "shared.example.com")...)
	n2 = append(n2, addrs(corev1.NodeHostName, "n2")...)

	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	services := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	slices := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, obj := range []any{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.0.0/24"}}, Status: corev1.NodeStatus{Addresses: n1}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}}, Status: corev1.NodeStatus{Addresses: n2}},
	} {
		if err := nodes.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	for _, obj := range extra {
		into := services
		if _, ok := obj.(*corev1.Node); ok {
			into = nodes
		}
		if err := into.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	for _, obj := range []any{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.1", ClusterIPs: []string{"10.96.0.1"}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "dns"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web"},
			Spec:   corev1.ServiceSpec{ClusterIP: "10.96.0.20", ClusterIPs: []string{"10.96.0.20"}, ExternalIPs: []string{"198.51.100.7"}, Type: corev1.ServiceTypeLoadBalancer},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "203.0.113.10"}, {Hostname: "lb-1.elb.example.com"}}}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "db"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.net"}},
	} {
		if err := services.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	err := slices.Add(&discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes", Labels: map[string]string{"kubernetes.io/service-name": "kubernetes"}},
		Endpoints:  []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &ListerClusterView{Nodes: corelisters.NewNodeLister(nodes), Services: corelisters.NewServiceLister(services),
		EndpointSlices: discoverylisters.NewEndpointSliceLister(slices), Synced: func() bool { return true }}
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
	// What a namespace editor (may create Services in team-z only) and
	// other Nodes can add to the cluster.
	service := func(name string, spec corev1.ServiceSpec) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "team-z", Name: name}, Spec: spec}
	}
	clusterIP := corev1.ServiceSpec{ClusterIP: "10.96.5.6", ClusterIPs: []string{"10.96.5.6"}}
	nodeNamed := func(name, ip string, names ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		for _, dns := range names {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: dns})
		}
		return n
	}
	asNode := func(name string, dns ...string) req {
		return with(func(r *req) { r.user, r.cn, r.dns, r.ips = "system:node:"+name, "system:node:"+name, dns, nil })
	}
	n3 := nodeNamed("n3.team-z.example.com", "10.0.0.30", "n3.team-z.example.com", "n3", "www.n3.team-z.example.com")
	type testCase struct {
		req     req
		allow   *certv1alpha1.NodeServingApproval
		cluster ClusterView
		extra   []any  // Nodes and Services added to hostile
		refused string // "" means approved
		err     bool
	}
	// withSAN is the node's request naming only san ("dns:NAME" or
	// "ip:ADDRESS").
	withSAN := func(san string) req {
		kind, value, _ := strings.Cut(san, ":")
		return with(func(r *req) {
			r.dns, r.ips = nil, nil
			if kind == "ip" {
				r.ips = []string{value}
			} else {
				r.dns = []string{value}
			}
		})
	}
	tests := map[string]testCase{
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
		"an IP not among its own":  {req: with(func(r *req) { r.ips = []string{"10.0.0.7"} }), refused: "10.0.0.7 is not among"},
		"kube-apiserver's address": {req: with(func(r *req) { r.ips = []string{"10.0.0.1"} }), refused: "kube-apiserver"},
		"a Service's address":      {req: with(func(r *req) { r.ips = []string{"10.96.0.10"} }), refused: "Service kube-system/dns"},
		"a Service's DNS name":     {req: with(func(r *req) { r.dns = []string{"kubernetes.default.svc"} }), refused: "kube-apiserver"},
		"one bad name among good":  {req: with(func(r *req) { r.dns = append(r.dns, "web.team-a") }), refused: "Service team-a/web"},
		"Node does not exist":      {req: with(func(r *req) { r.user, r.cn = "system:node:n9", "system:node:n9" }), refused: `no Node "n9"`},
		"outside the DNS suffixes": {req: node, allow: &certv1alpha1.NodeServingApproval{AllowedDNSSuffixes: []string{".nodes.example.com"}}, refused: `"n1" is not under`},
		"inside the DNS suffixes":  {req: with(func(r *req) { r.dns = r.dns[:1] }), allow: &certv1alpha1.NodeServingApproval{AllowedDNSSuffixes: []string{".nodes.example.com"}}},
		"outside the IP prefixes":  {req: node, allow: &certv1alpha1.NodeServingApproval{AllowedIPPrefixes: []string{"192.168.0.0/16"}}, refused: "allowed prefixes"},
		"inside the IP prefixes":   {req: node, allow: &certv1alpha1.NodeServingApproval{AllowedIPPrefixes: []string{"10.0.0.0/24"}}},
		"cluster not readable":     {req: node, cluster: &ListerClusterView{Synced: func() bool { return false }}, err: true},
		// A namespace editor cannot veto a node's own names: an
		// ExternalName's target is not the Service's, and the node's name
		// is proven by its identity, whatever Service is named like it.
		"an ExternalName Service aimed at the node's DNS name": {req: node,
			extra: []any{service("x", corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "N1.nodes.example.com."})}},
		"a Service named as the node": {req: node, extra: []any{service("n1", clusterIP)}},
		"a Service whose name and namespace are inside the node's name": {req: asNode("n3.team-z.example.com", "n3.team-z.example.com", "n3"),
			extra: []any{n3, service("n3", clusterIP)}},
		"the same Service pair in another of the node's names": {req: asNode("n3.team-z.example.com", "www.n3.team-z.example.com"),
			extra: []any{n3, service("n3", clusterIP)}, refused: "Service team-z/n3"},
		"another Node claiming the node's name": {req: with(func(r *req) { r.dns = []string{"n1"} }),
			extra: []any{nodeNamed("n4", "10.0.0.40", "n1")}},
		"another Node claiming the node's other name": {req: node,
			extra: []any{nodeNamed("n4", "10.0.0.40", "n1.nodes.example.com")}, refused: "also claimed by Node n4"},
		// Its name proves nothing against the names that are never a node's.
		"a node named kubernetes": {req: asNode("kubernetes", "kubernetes"),
			extra: []any{nodeNamed("kubernetes", "10.0.0.50", "kubernetes")}, refused: "kube-apiserver"},
		"a node named like a Service's cluster DNS name": {req: asNode("web.team-a.svc", "web.team-a.svc"),
			extra: []any{nodeNamed("web.team-a.svc", "10.0.0.51", "web.team-a.svc")}, refused: "in-cluster"},
		// kube-proxy routes a Service's external IPs on every node: the
		// address is the Service's too (and the refusal says whose).
		"a Service's externalIPs holding the node's IP": {req: node,
			extra:   []any{service("y", corev1.ServiceSpec{ClusterIP: "10.96.5.5", ClusterIPs: []string{"10.96.5.5"}, ExternalIPs: []string{"10.0.0.5"}})},
			refused: "spec.externalIPs of Service team-z/y"},
	}
	// Every address below is among n1's (it wrote them in its own status):
	// each is refused by the rule that names it.
	for san, rule := range map[string]string{
		// kube-apiserver and Services, by address.
		"ip:10.0.0.1":     "kube-apiserver",
		"ip:10.96.0.1":    "Service default/kubernetes",
		"ip:10.96.0.10":   "Service kube-system/dns",
		"ip:10.96.0.20":   "Service team-a/web",
		"ip:203.0.113.10": "Service team-a/web",
		"ip:198.51.100.7": "spec.externalIPs of Service team-a/web",
		// Another node's, and one two nodes claim.
		"ip:10.0.0.6":   "also claimed by Node n2",
		"ip:10.0.0.9":   "also claimed by Node n2",
		"ip:10.244.1.7": "pod range 10.244.1.0/24 of Node n2",
		// Never a node's.
		"ip:127.0.0.1":          "loopback",
		"ip:127.0.0.2":          "loopback",
		"ip:::1":                "loopback",
		"ip:::ffff:127.0.0.1":   "loopback",
		"ip:0.0.0.0":            "unspecified",
		"ip:::":                 "unspecified",
		"ip:169.254.169.254":    "link-local",
		"ip:169.254.10.1":       "link-local",
		"ip:fe80::1":            "link-local",
		"ip:224.0.0.1":          "multicast",
		"ip:ff02::1":            "multicast",
		"ip:255.255.255.255":    "broadcast",
		"ip:fd00:ec2::254":      "metadata",
		"ip:100.100.100.200":    "metadata",
		"ip:168.63.129.16":      "metadata",
		"ip:64:ff9b::a9fe:a9fe": "link-local",
		// kube-apiserver and Services, by name, in every form a resolver
		// takes.
		"dns:kubernetes":                            "kube-apiserver",
		"dns:kubernetes.default":                    "kube-apiserver",
		"dns:kubernetes.default.svc":                "kube-apiserver",
		"dns:kubernetes.default.svc.cluster.local":  "kube-apiserver",
		"dns:KUBERNETES.DEFAULT.SVC.CLUSTER.LOCAL.": "kube-apiserver",
		"dns:kubernetes.example.com":                "kube-apiserver",
		"dns:web":                                   "Service team-a/web",
		"dns:web.team-a":                            "Service team-a/web",
		"dns:web.team-a.svc":                        "in-cluster",
		"dns:web.team-a.svc.cluster.local":          "in-cluster",
		"dns:Web.Team-A.":                           "Service team-a/web",
		"dns:pod-0.web.team-a":                      "Service team-a/web",
		"dns:web.team-a.example.com":                "Service team-a/web",
		"dns:dns":                                   "Service kube-system/dns",
		"dns:db":                                    "Service team-b/db",
		"dns:anything":                              "single-label",
		"dns:x.y.svc":                               "in-cluster",
		"dns:10-0-0-5.default.pod.cluster.local":    "in-cluster",
		"dns:foo.cluster.local":                     "in-cluster",
		"dns:lb-1.elb.example.com":                  "load-balancer hostname of Service team-a/web",
		"dns:LB-1.ELB.example.com.":                 "load-balancer hostname of Service team-a/web",
		// Loopback names.
		"dns:localhost":             "localhost",
		"dns:LOCALHOST.":            "localhost",
		"dns:app.localhost":         "localhost",
		"dns:localhost.localdomain": "localhost",
		"dns:ip6-localhost":         "localhost",
		// IP addresses written as DNS names.
		"dns:10.0.0.5":          "IP address written as a DNS name",
		"dns:10.0.0.1":          "IP address written as a DNS name",
		"dns:10.0.0.5.":         "IP address written as a DNS name",
		"dns:10.5":              "IP address written as a DNS name",
		"dns:167772165":         "IP address written as a DNS name",
		"dns:0x0a.0.0.5":        "IP address written as a DNS name",
		"dns:::1":               "IP address written as a DNS name",
		"dns:10.0.0.5.nip.io":   "IP address written as a DNS name",
		"dns:10-0-0-5.sslip.io": "IP address written as a DNS name",
		// Another node's names.
		"dns:n2":                   "single-label",
		"dns:n2.nodes.example.com": "also claimed by Node n2",
		"dns:shared.example.com":   "also claimed by Node n2",
		// A wildcard is every host of a domain.
		"dns:*.nodes.example.com": "wildcard",
		// What no resolver looks up.
		"dns:n1.nodes.example.com\x00.evil": "not a valid DNS name",
		"dns:n1 .nodes.example.com":         "not a valid DNS name",
		"dns:n1..example.com":               "not a valid DNS name",
	} {
		tests["refused "+san] = testCase{req: withSAN(san), refused: rule}
	}
	// What n1 may have: its own names in any case, its own IPs.
	// (An ExternalName is a CNAME from the Service's own name to its
	// target: the target is not the Service's.)
	for _, san := range []string{"dns:N1.Nodes.Example.com.", "dns:n1", "ip:10.0.0.5", "ip:2001:db8::5", "dns:db.example.net"} {
		tests["accepted "+san] = testCase{req: withSAN(san)}
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
				cluster = hostile(t, tc.extra...)
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
				if err != nil || d == nil || d.Reason != ReasonAutoApproved || !strings.Contains(d.Message, "Node "+strings.TrimPrefix(tc.req.user, "system:node:")) {
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
