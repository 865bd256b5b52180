package issuer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	kubeinformers "k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
)

// ClusterView is what a NodeServing decision reads from the host cluster.
type ClusterView interface {
	// Node returns the Node object of that name (a NotFound error when
	// there is none).
	Node(name string) (*corev1.Node, error)
	// ListNodes returns every Node: an address another Node claims too
	// is neither's.
	ListNodes() ([]*corev1.Node, error)
	// ListServices returns every Service: their names, in the forms a
	// pod's resolver takes, and their load-balancer hostnames are no
	// node's (but the requesting node's own name stays its own).
	ListServices() ([]*corev1.Service, error)
	// Reserved says whether ip is an address no node may be certified for
	// (kube-apiserver's, a Service's), and whose.
	Reserved(ip net.IP) (string, bool, error)
}

// NodeServingRefusal is why a serving request was not approved; the
// request stays pending for a person, and the reason goes into an event.
// NodeDependent says the refusal rests on the Node object as read (it is
// missing, or lacks an address), which a moment later may read otherwise;
// every other refusal is about the request itself and is final.
type NodeServingRefusal struct {
	Reason        string
	NodeDependent bool
}

func (r *NodeServingRefusal) Error() string { return r.Reason }

func refuse(format string, args ...any) (*Decision, error) {
	return nil, &NodeServingRefusal{Reason: fmt.Sprintf(format, args...)}
}

func refuseForNode(format string, args ...any) (*Decision, error) {
	return nil, &NodeServingRefusal{Reason: fmt.Sprintf(format, args...), NodeDependent: true}
}

var (
	servingRequired = []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageServerAuth}
	servingAllowed  = []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageServerAuth}
	nodeDNSTypes    = []corev1.NodeAddressType{corev1.NodeHostName, corev1.NodeInternalDNS, corev1.NodeExternalDNS}
	nodeIPTypes     = []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP}
)

// DecideNodeServing approves a node's serving certificate request when
// the requester is the node (system:node:<name> in system:nodes), the
// request's CN is the requester and its organization exactly system:nodes,
// the usages are the serving ones, and every SAN is one of that Node
// object's addresses (DNS names among Hostname, InternalDNS, ExternalDNS;
// IPs among InternalIP, ExternalIP) that is not demonstrably another's or
// nobody's (see addresses.go: kube-apiserver's, a Service's in any form,
// another Node's, loopback, link-local, metadata, an IP written as a
// name), and all are within the Signer's allow-lists. A refusal is a
// *NodeServingRefusal naming the rule; any other error means the cluster
// could not be read.
func DecideNodeServing(view ClusterView, signer *certv1alpha1.Signer, csr *certv1alpha1.CertificateSigningRequest) (*Decision, error) {
	nodeName, ok := strings.CutPrefix(csr.Spec.Username, "system:node:")
	if !ok || nodeName == "" || !slices.Contains(csr.Spec.Groups, "system:nodes") {
		return refuse("requester %q is not a node (system:node:<name> in group system:nodes)", csr.Spec.Username)
	}
	req, err := validation.ParseStoredCSR(csr.Spec.Request)
	if err != nil {
		return refuse("the request does not parse: %v", err)
	}
	if req.Subject.CommonName != csr.Spec.Username {
		return refuse("common name %q is not the requester %q", req.Subject.CommonName, csr.Spec.Username)
	}
	if !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		return refuse("organization %v is not exactly [system:nodes]", req.Subject.Organization)
	}
	for _, u := range servingRequired {
		if !slices.Contains(csr.Spec.Usages, u) {
			return refuse("usages %v lack %q", csr.Spec.Usages, u)
		}
	}
	for _, u := range csr.Spec.Usages {
		if !slices.Contains(servingAllowed, u) {
			return refuse("usage %q is not a serving usage", u)
		}
	}
	if len(req.EmailAddresses)+len(req.URIs) > 0 {
		return refuse("email and URI names are not node addresses")
	}
	if len(req.DNSNames)+len(req.IPAddresses) == 0 {
		return refuse("the request names no address")
	}
	node, err := view.Node(nodeName)
	if apierrors.IsNotFound(err) {
		return refuseForNode("there is no Node %q", nodeName)
	}
	if err != nil {
		return nil, fmt.Errorf("reading Node %s: %w", nodeName, err)
	}
	var allow *certv1alpha1.NodeServingApproval
	if signer.Spec.Approval.NodeServing != nil {
		allow = signer.Spec.Approval.NodeServing
	}
	others, err := readClaims(view, nodeName)
	if err != nil {
		return nil, err
	}
	for _, name := range req.DNSNames {
		if !hasAddress(node, name, nodeDNSTypes) {
			return refuseForNode("DNS name %q is not among Node %s's addresses", name, nodeName)
		}
		if why := others.dnsRefusal(name); why != "" {
			return refuse("DNS name %q %s", name, why)
		}
		if allow != nil && len(allow.AllowedDNSSuffixes) > 0 && !slices.ContainsFunc(allow.AllowedDNSSuffixes, func(s string) bool { return dnsUnder(name, s) }) {
			return refuse("DNS name %q is not under the signer's allowed suffixes %v", name, allow.AllowedDNSSuffixes)
		}
	}
	for _, ip := range req.IPAddresses {
		if !hasAddress(node, ip.String(), nodeIPTypes) {
			return refuseForNode("IP address %s is not among Node %s's addresses", ip, nodeName)
		}
		if why := others.ipRefusal(ip); why != "" {
			return refuse("IP address %s %s", ip, why)
		}
		owner, reserved, err := view.Reserved(ip)
		if err != nil {
			return nil, err
		}
		if reserved {
			return refuse("IP address %s is %s", ip, owner)
		}
		if allow != nil && len(allow.AllowedIPPrefixes) > 0 && !inPrefixes(ip, allow.AllowedIPPrefixes) {
			return refuse("IP address %s is not within the signer's allowed prefixes %v", ip, allow.AllowedIPPrefixes)
		}
	}
	return &Decision{
		Reason: ReasonAutoApproved,
		Message: fmt.Sprintf("Auto approving node serving certificate: the requester is node %s and every address (%d DNS, %d IP) is among Node %s's.",
			nodeName, len(req.DNSNames), len(req.IPAddresses), nodeName),
	}, nil
}

func hasAddress(node *corev1.Node, value string, types []corev1.NodeAddressType) bool {
	for _, a := range node.Status.Addresses {
		if !slices.Contains(types, a.Type) {
			continue
		}
		if ip := net.ParseIP(a.Address); ip != nil {
			if parsed := net.ParseIP(value); parsed != nil && parsed.Equal(ip) {
				return true
			}
			continue
		}
		if normalizeName(a.Address) == normalizeName(value) {
			return true
		}
	}
	return false
}

func dnsUnder(name, suffix string) bool {
	name, suffix = strings.ToLower(name), strings.ToLower(suffix)
	if strings.HasPrefix(suffix, ".") {
		return strings.HasSuffix(name, suffix)
	}
	return name == suffix || strings.HasSuffix(name, "."+suffix)
}

func inPrefixes(ip net.IP, prefixes []string) bool {
	addr, ok := netip.AddrFromSlice(ip)
	if !ok {
		return false
	}
	addr = addr.Unmap()
	for _, p := range prefixes {
		if prefix, err := netip.ParsePrefix(p); err == nil && prefix.Contains(addr) {
			return true
		}
	}
	return false
}

// ListerClusterView reads the host cluster from informers' listers.
type ListerClusterView struct {
	Nodes          corelisters.NodeLister
	Services       corelisters.ServiceLister
	EndpointSlices discoverylisters.EndpointSliceLister
	// Synced says the listers hold the cluster; until then nothing is
	// decided (a missing Node could just not be listed yet).
	Synced func() bool
}

// NewListerClusterView watches Nodes and Services, and kube-apiserver's
// EndpointSlices in namespace default, through the factories (which the
// caller starts).
func NewListerClusterView(all, inDefault kubeinformers.SharedInformerFactory) *ListerClusterView {
	nodes, services := all.Core().V1().Nodes(), all.Core().V1().Services()
	endpointSlices := inDefault.Discovery().V1().EndpointSlices()
	return &ListerClusterView{
		Nodes: nodes.Lister(), Services: services.Lister(), EndpointSlices: endpointSlices.Lister(),
		Synced: func() bool {
			return nodes.Informer().HasSynced() && services.Informer().HasSynced() && endpointSlices.Informer().HasSynced()
		},
	}
}

var errNotSynced = errors.New("the host cluster's Nodes and Services are not read yet")

func (v *ListerClusterView) Node(name string) (*corev1.Node, error) {
	if v.Synced != nil && !v.Synced() {
		return nil, errNotSynced
	}
	return v.Nodes.Get(name)
}

func (v *ListerClusterView) ListNodes() ([]*corev1.Node, error) {
	if v.Synced != nil && !v.Synced() {
		return nil, errNotSynced
	}
	return v.Nodes.List(labels.Everything())
}

func (v *ListerClusterView) ListServices() ([]*corev1.Service, error) {
	if v.Synced != nil && !v.Synced() {
		return nil, errNotSynced
	}
	return v.Services.List(labels.Everything())
}

// Reserved checks kube-apiserver's endpoints (the default/kubernetes
// Service's EndpointSlices) and every Service's cluster, external and
// load-balancer IPs.
func (v *ListerClusterView) Reserved(ip net.IP) (string, bool, error) {
	if v.Synced != nil && !v.Synced() {
		return "", false, errNotSynced
	}
	endpointSlices, err := v.EndpointSlices.EndpointSlices(corev1.NamespaceDefault).List(labels.SelectorFromSet(labels.Set{"kubernetes.io/service-name": "kubernetes"}))
	if err != nil {
		return "", false, err
	}
	for _, s := range endpointSlices {
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				if parsed := net.ParseIP(a); parsed != nil && parsed.Equal(ip) {
					return "an address of kube-apiserver", true, nil
				}
			}
		}
	}
	services, err := v.Services.List(labels.Everything())
	if err != nil {
		return "", false, err
	}
	has := func(addrs []string) bool {
		return slices.ContainsFunc(addrs, func(a string) bool { parsed := net.ParseIP(a); return parsed != nil && parsed.Equal(ip) })
	}
	for _, svc := range services {
		var ingress []string
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			ingress = append(ingress, ing.IP)
		}
		switch {
		case has(svc.Spec.ClusterIPs) || has([]string{svc.Spec.ClusterIP}):
			return fmt.Sprintf("a cluster IP of Service %s/%s", svc.Namespace, svc.Name), true, nil
		case has(svc.Spec.ExternalIPs):
			// kube-proxy routes a Service's external IPs on every node, so
			// the address is the Service's too. Whoever may set
			// externalIPs can thus hold back a node's certificate (and
			// could already intercept its traffic, CVE-2020-8554): the
			// message names the Service and the remedy.
			return fmt.Sprintf("in spec.externalIPs of Service %s/%s, which kube-proxy routes to the Service on every node "+
				"(kube-apiserver's DenyServiceExternalIPs admission plugin keeps namespaces from setting them)", svc.Namespace, svc.Name), true, nil
		case has(ingress):
			return fmt.Sprintf("a load-balancer IP of Service %s/%s", svc.Namespace, svc.Name), true, nil
		}
	}
	return "", false, nil
}

// AutoApproves says whether AutoApprove decides the requests of signer
// (its mode approves without a person): the approver controller watches
// the pending requests of these signers only.
func AutoApproves(signer *certv1alpha1.Signer) bool {
	switch signer.Spec.Approval.Mode {
	case certv1alpha1.ApprovalNodeClient, certv1alpha1.ApprovalNodeServing:
		return true
	}
	return false
}

// AutoApprove decides a request for a signer that approves without a
// person (AutoApproves): NodeClient by a SubjectAccessReview, NodeServing against the
// Node. A nil decision leaves it to a person; for NodeServing the error is
// then a *NodeServingRefusal saying why. Any other error means the
// decision could not be made now.
func AutoApprove(ctx context.Context, authz authorizer.Authorizer, cluster ClusterView, signer *certv1alpha1.Signer, csr *certv1alpha1.CertificateSigningRequest) (*Decision, error) {
	if !AutoApproves(signer) {
		return nil, nil
	}
	switch signer.Spec.Approval.Mode {
	case certv1alpha1.ApprovalNodeClient:
		return AutoApproveNodeClient(ctx, authz, signer, csr)
	case certv1alpha1.ApprovalNodeServing:
		if cluster == nil {
			return refuse("NodeServing approval reads Nodes from the host cluster, and rekey-apiserver has none (--kubeconfig)")
		}
		return DecideNodeServing(cluster, signer, csr)
	}
	return nil, nil
}

// Attested=False reasons of a request in Attestation mode refused for its
// names before its evidence is verified.
const (
	ReasonAddressRefused    = "AddressRefused"
	ReasonNoHostCluster     = "NoHostCluster"
	ReasonHostClusterUnread = "HostClusterUnread"
)

// keyOnlyUsages are the usages that are not extended key usages: a
// certificate with only these has no extended key usage, which most TLS
// stacks accept for any purpose, server authentication included.
var keyOnlyUsages = []certv1alpha1.KeyUsage{
	certv1alpha1.UsageSigning, certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageContentCommitment, certv1alpha1.UsageKeyEncipherment,
	certv1alpha1.UsageKeyAgreement, certv1alpha1.UsageDataEncipherment, certv1alpha1.UsageCertSign, certv1alpha1.UsageCRLSign,
	certv1alpha1.UsageEncipherOnly, certv1alpha1.UsageDecipherOnly,
}

// CouldServe says whether the certificate a request asks for could
// authenticate a server or name anything: it asks for server auth or any
// usage, or for no extended usage at all, or it carries a subject
// alternative name of any type (or does not parse). Attestation proves
// which machine asks, not which names are that machine's, so a request in
// Attestation mode that could serve must also pass DecideNodeServing.
func CouldServe(csr *certv1alpha1.CertificateSigningRequest) bool {
	if slices.Contains(csr.Spec.Usages, certv1alpha1.UsageServerAuth) || slices.Contains(csr.Spec.Usages, certv1alpha1.UsageAny) {
		return true
	}
	if !slices.ContainsFunc(csr.Spec.Usages, func(u certv1alpha1.KeyUsage) bool { return !slices.Contains(keyOnlyUsages, u) }) {
		return true
	}
	req, err := validation.ParseStoredCSR(csr.Spec.Request)
	return err != nil || len(req.DNSNames)+len(req.IPAddresses)+len(req.EmailAddresses)+len(req.URIs) > 0
}

// AttestedNamesRefusal decides the names of a request in Attestation mode
// before its evidence is verified (a refusal then spends no challenge): a
// request that could serve (CouldServe) passes only DecideNodeServing, and
// with no host cluster (view nil) nothing can tell whose an address is, so
// it is refused. It returns the Attested=False outcome, or nil when the
// request may go on to attestation.
func AttestedNamesRefusal(view ClusterView, signer *certv1alpha1.Signer, csr *certv1alpha1.CertificateSigningRequest) *Attestation {
	if !CouldServe(csr) {
		return nil
	}
	if view == nil {
		return &Attestation{Decision: Decision{Reason: ReasonNoHostCluster, Message: "A certificate that can serve or names an address is approved in Attestation mode only against the Node's addresses in the host cluster, and rekey-apiserver has none (--kubeconfig)."}}
	}
	_, err := DecideNodeServing(view, signer, csr)
	var refusal *NodeServingRefusal
	switch {
	case errors.As(err, &refusal):
		return &Attestation{Decision: Decision{Reason: ReasonAddressRefused, Message: "Not a serving certificate this node may have: " + refusal.Reason}}
	case err != nil:
		return &Attestation{Decision: Decision{Reason: ReasonHostClusterUnread, Message: fmt.Sprintf("The node's addresses could not be checked against the host cluster now (%v); ask again.", err)}}
	}
	return nil
}
