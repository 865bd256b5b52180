package issuer

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// What rekey accepts as a node's address. A node writes its own Node
// status, so that an address is listed there proves only that the node
// says so. On top of "listed in its own Node's status", an address must
// not be one that is demonstrably somebody else's or nobody's:
//
//   - a DNS name must be one (RFC 1123), and never a wildcard;
//   - never a node's: loopback, unspecified, link-local (where cloud
//     metadata services answer), multicast and broadcast addresses, the
//     cloud metadata addresses outside those ranges, the names of the
//     local host (localhost, *.localhost, ...), and any of these inside a
//     NAT64 or IPv4-mapped address;
//   - an IP address written as a DNS name (10.0.0.5, 10.5, 167772165,
//     0x0a.0.0.5, ::1, and names that begin with an address in dotted or
//     dashed form as wildcard DNS services resolve them, 10.0.0.5.nip.io,
//     10-0-0-5.sslip.io) is not a DNS name: it is refused, and the node
//     asks for the address as an IP SAN, where it is checked as one;
//   - kube-apiserver's and Services': kube-apiserver's endpoint addresses
//     and every Service's cluster, external and load-balancer IPs; every
//     name a pod's resolver would send to a Service or a Pod: anything
//     whose first label is "kubernetes", anything with a "svc" or "pod"
//     label after the first or under cluster.local, any name in which two
//     adjacent labels are an existing Service's name and namespace
//     (web.team-a, pod-0.web.team-a, web.team-a.example.com), and every
//     single-label name except the node's own name (a pod's search path
//     turns "web" into the Service web of its namespace, and a Service
//     may be created later); load-balancer ingress hostnames of Services.
//     An ExternalName Service's target is not the Service's (the Service
//     is a CNAME from its own name to it), so it vetoes nothing;
//   - claimed by another Node (any of its addresses, or its name): an
//     address two Nodes claim is neither's, since rekey cannot tell which
//     one tells the truth; and an IP within any Node's pod range.
//
// The node's own Node name and that name's first label are the node's,
// proven by its authenticated identity (system:node:<name>), not by what
// it wrote: a Service's name or name.namespace pair and another Node's
// claim do not veto them, or anyone allowed to create a Service in one
// namespace (or a Node) could block any node's serving certificate. The
// rules of names that are never a node's (wildcard, kubernetes, in-cluster,
// localhost, IP as a name, invalid) still apply to them. So a node whose
// name is a Service's short name is certified for that name; the
// certificate is from the node-serving CA, which Service clients do not
// trust for Services.
//
// What this does not catch is an address no one else claims and rekey
// cannot see: an IP or name of a machine outside the cluster, a Service IP
// not allocated yet, a name public DNS resolves anywhere. docs/security.md
// says what that buys a node.

// cloudMetadata are the metadata and platform service addresses that lie
// outside the link-local range (which is refused whole).
var cloudMetadata = map[netip.Addr]string{
	netip.MustParseAddr("fd00:ec2::254"):   "the AWS instance metadata service",
	netip.MustParseAddr("fd00:ec2::253"):   "the AWS DNS resolver",
	netip.MustParseAddr("fd00:ec2::123"):   "the AWS time service",
	netip.MustParseAddr("100.100.100.200"): "the Alibaba Cloud metadata service",
	netip.MustParseAddr("168.63.129.16"):   "the Azure platform service (WireServer)",
}

var (
	nat64          = netip.MustParsePrefix("64:ff9b::/96")
	thisNetwork    = netip.MustParsePrefix("0.0.0.0/8")
	broadcast      = netip.MustParseAddr("255.255.255.255")
	localhostNames = []string{"localhost", "localhost.localdomain", "localhost4", "localhost6", "ip6-localhost", "ip6-loopback"}
)

// neverANode says why addr is no node's address, or "".
func neverANode(addr netip.Addr) string {
	addr = addr.Unmap()
	if nat64.Contains(addr) {
		b := addr.As16()
		if why := neverANode(netip.AddrFrom4([4]byte(b[12:]))); why != "" {
			return why + " (embedded in a NAT64 address)"
		}
	}
	switch {
	case addr.IsUnspecified() || addr.Is4() && thisNetwork.Contains(addr):
		return "an unspecified address"
	case addr.IsLoopback():
		return "a loopback address"
	case addr.IsLinkLocalUnicast():
		return "a link-local address (where cloud metadata services answer)"
	case addr.IsMulticast():
		return "a multicast address"
	case addr == broadcast:
		return "the broadcast address"
	}
	if who, ok := cloudMetadata[addr]; ok {
		return "a cloud metadata address (" + who + ")"
	}
	return ""
}

// normalizeName is a DNS name as resolvers compare it: lower case, without
// the trailing dot of a fully qualified name.
func normalizeName(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

// ipAsName says whether a DNS name (normalized) is an IP address in
// disguise: a literal address, a form inet_aton reads as one (every label
// a decimal, octal or hex number), or a name whose first labels are an
// IPv4 address in dotted or dashed form, or whose first label is an IPv6
// address with '-' for ':', as wildcard DNS services resolve them.
func ipAsName(name string) bool {
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	labels := strings.Split(name, ".")
	numeric := true
	for _, l := range labels {
		numeric = numeric && isNumberLabel(l)
	}
	if numeric {
		return true
	}
	if len(labels) >= 4 && isIPv4Octets(labels[:4]) {
		return true
	}
	if parts := strings.Split(labels[0], "-"); len(parts) == 4 && isIPv4Octets(parts) {
		return true
	}
	if strings.Contains(labels[0], "-") {
		if a, err := netip.ParseAddr(strings.ReplaceAll(labels[0], "-", ":")); err == nil && a.Is6() {
			return true
		}
	}
	return false
}

func isNumberLabel(l string) bool {
	if hex, ok := strings.CutPrefix(l, "0x"); ok {
		l = hex
		return l != "" && strings.Trim(l, "0123456789abcdef") == ""
	}
	return l != "" && strings.Trim(l, "0123456789") == ""
}

func isIPv4Octets(parts []string) bool {
	for _, p := range parts {
		var n int
		if p == "" || len(p) > 3 || strings.Trim(p, "0123456789") != "" {
			return false
		}
		if _, err := fmt.Sscan(p, &n); err != nil || n > 255 {
			return false
		}
	}
	return true
}

func isLocalhost(name string) bool {
	for _, l := range localhostNames {
		if name == l {
			return true
		}
	}
	return strings.HasSuffix(name, ".localhost")
}

// claims is what the host cluster says about addresses, read once per
// decision: whose they are besides the requesting node's.
type claims struct {
	node string
	// byOtherNodes maps a normalized DNS name or IP (netip form) to the
	// other Node that claims it.
	byOtherNodes map[string]string
	podRanges    []podRange
	// services maps "name.namespace" and "name" to "namespace/name".
	servicePairs, serviceNames map[string]string
	lbHostnames                map[string]string
}

type podRange struct {
	prefix netip.Prefix
	node   string
}

func readClaims(view ClusterView, nodeName string) (*claims, error) {
	nodes, err := view.ListNodes()
	if err != nil {
		return nil, fmt.Errorf("listing Nodes: %w", err)
	}
	services, err := view.ListServices()
	if err != nil {
		return nil, fmt.Errorf("listing Services: %w", err)
	}
	c := &claims{node: nodeName, byOtherNodes: map[string]string{}, servicePairs: map[string]string{}, serviceNames: map[string]string{},
		lbHostnames: map[string]string{}}
	for _, n := range nodes {
		ranges := n.Spec.PodCIDRs
		if len(ranges) == 0 && n.Spec.PodCIDR != "" {
			ranges = []string{n.Spec.PodCIDR}
		}
		for _, r := range ranges {
			if p, err := netip.ParsePrefix(r); err == nil {
				c.podRanges = append(c.podRanges, podRange{prefix: p.Masked(), node: n.Name})
			}
		}
		if n.Name == nodeName {
			continue
		}
		c.byOtherNodes[normalizeName(n.Name)] = n.Name
		for _, a := range n.Status.Addresses {
			c.byOtherNodes[addressKey(a.Address)] = n.Name
		}
	}
	for _, s := range services {
		id := s.Namespace + "/" + s.Name
		c.servicePairs[s.Name+"."+s.Namespace] = id
		if _, ok := c.serviceNames[s.Name]; !ok {
			c.serviceNames[s.Name] = id
		}
		for _, ing := range s.Status.LoadBalancer.Ingress {
			if ing.Hostname != "" {
				c.lbHostnames[normalizeName(ing.Hostname)] = id
			}
		}
	}
	return c, nil
}

// addressKey is how an address is compared: an IP in its canonical form
// (IPv4-mapped unmapped), a name normalized.
func addressKey(value string) string {
	if a, err := netip.ParseAddr(value); err == nil {
		return a.Unmap().String()
	}
	return normalizeName(value)
}

// dnsRefusal says why no node's serving certificate may name name, or "".
func (c *claims) dnsRefusal(name string) string {
	n := normalizeName(name)
	labels := strings.Split(n, ".")
	switch {
	case strings.Contains(n, "*"):
		return "is a wildcard, which names every host of a domain, never one node's address"
	case labels[0] == "kubernetes":
		return "is a name of kube-apiserver (the Service default/kubernetes, in any form)"
	case n == "cluster.local" || strings.HasSuffix(n, ".cluster.local") || inClusterLabel(labels):
		return "is an in-cluster DNS name (of a Service or a Pod)"
	case ipAsName(n):
		return "is an IP address written as a DNS name: ask for it as an IP address, which is checked as one"
	case isLocalhost(n):
		return "names the local host (localhost)"
	case len(validation.IsDNS1123Subdomain(n)) > 0:
		// What no resolver looks up is no address, and a name a sloppy
		// client might read otherwise (a NUL, a space) is not checked here.
		return "is not a valid DNS name (RFC 1123: letters, digits, '-' and '.')"
	}
	// The node's own name is proven by its identity: a Service named like
	// it, or another Node claiming it, does not make it theirs.
	own := normalizeName(c.node)
	if n == own || n == strings.Split(own, ".")[0] {
		if svc, ok := c.lbHostnames[n]; ok {
			return fmt.Sprintf("is the load-balancer hostname of Service %s", svc)
		}
		return ""
	}
	for i := 0; i+1 < len(labels); i++ {
		if svc, ok := c.servicePairs[labels[i]+"."+labels[i+1]]; ok {
			return fmt.Sprintf("resolves to Service %s through a pod's DNS search path", svc)
		}
	}
	if len(labels) == 1 {
		if svc, ok := c.serviceNames[n]; ok {
			return fmt.Sprintf("is the name of Service %s, which a pod's DNS search path resolves", svc)
		}
		return "is a single-label name, which a pod's DNS search path resolves to a Service of that name in its namespace: only the node's own name is accepted as one"
	}
	if svc, ok := c.lbHostnames[n]; ok {
		return fmt.Sprintf("is the load-balancer hostname of Service %s", svc)
	}
	if other, ok := c.byOtherNodes[n]; ok {
		return fmt.Sprintf("is also claimed by Node %s (an address two Nodes claim is neither's)", other)
	}
	return ""
}

// inClusterLabel: a "svc" or "pod" label after the first is the shape of
// the cluster DNS zone's records (<svc>.<ns>.svc, <ip>.<ns>.pod), whatever
// the zone is called.
func inClusterLabel(labels []string) bool {
	for _, l := range labels[1:] {
		if l == "svc" || l == "pod" {
			return true
		}
	}
	return false
}

// ipRefusal says why no node's serving certificate may name ip, or ""
// (kube-apiserver's and Services' addresses are the ClusterView's
// Reserved).
func (c *claims) ipRefusal(ip net.IP) string {
	addr, ok := netip.AddrFromSlice(ip)
	if !ok {
		return "is not an IP address"
	}
	addr = addr.Unmap()
	if why := neverANode(addr); why != "" {
		return "is " + why
	}
	if other, ok := c.byOtherNodes[addr.String()]; ok {
		return fmt.Sprintf("is also claimed by Node %s (an address two Nodes claim is neither's)", other)
	}
	for _, r := range c.podRanges {
		if r.prefix.Contains(addr) {
			return fmt.Sprintf("is within the pod range %s of Node %s", r.prefix, r.node)
		}
	}
	return ""
}
