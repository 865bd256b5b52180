package standalone

import (
	"crypto/x509"
	"sync"
	"sync/atomic"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"

	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/strictpem"
)

// NodeClientCA is the CertificateAuthority whose certificates a standalone
// server accepts as node identities.
const NodeClientCA = "rekey.io-kube-apiserver-client-kubelet"

// NodeTrust lets a standalone server authenticate nodes with the client
// certificates its own kubelet client signer issued, as a cluster's
// kube-apiserver does once that CA's trust bundle is in its
// --client-ca-file: so rekey-agent renews with the node's certificate.
// Only that CA is trusted (its Signer issues only CN system:node:<name>,
// O system:nodes, after NodeClient approval), following its trust bundle
// through rotations. The CA lister is bound once the server has one.
type NodeTrust struct {
	lister atomic.Pointer[rotationlisters.CertificateAuthorityLister]

	mu     sync.Mutex
	bundle string
	roots  *x509.CertPool
}

// Bind gives the trust its view of CertificateAuthorities.
func (n *NodeTrust) Bind(l rotationlisters.CertificateAuthorityLister) { n.lister.Store(&l) }

// Authenticator authenticates client certificates that chain to the node
// client CA's current trust bundle, the user being the certificate's CN
// and groups its organizations.
func (n *NodeTrust) Authenticator() authenticator.Request {
	return x509request.NewDynamic(n.verifyOptions, x509request.CommonNameUserConversion)
}

// verifyOptions answers "no opinion" until the CA has a trust bundle.
func (n *NodeTrust) verifyOptions() (x509.VerifyOptions, bool) {
	l := n.lister.Load()
	if l == nil {
		return x509.VerifyOptions{}, false
	}
	ca, err := (*l).Get(NodeClientCA)
	if err != nil || ca.Status.TrustBundle == "" {
		return x509.VerifyOptions{}, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if ca.Status.TrustBundle != n.bundle {
		certs, err := strictpem.Certificates([]byte(ca.Status.TrustBundle), 16)
		if err != nil {
			return x509.VerifyOptions{}, false
		}
		pool := x509.NewCertPool()
		for _, c := range certs {
			pool.AddCert(c)
		}
		n.bundle, n.roots = ca.Status.TrustBundle, pool
	}
	return x509.VerifyOptions{Roots: n.roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true
}
