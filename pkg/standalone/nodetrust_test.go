package standalone

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/pki"
)

func TestNodeTrustFollowsTheNodeClientCA(t *testing.T) {
	nodeCA, err := pki.NewCA("kubelet client CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := pki.NewCA("another signer's CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(ca *pki.KeyPair) *http.Request {
		kp, err := ca.Issue(&x509.Certificate{Subject: pkix.Name{CommonName: "system:node:n1", Organization: []string{"system:nodes"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return &http.Request{TLS: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{kp.Cert}}}
	}
	trust := &NodeTrust{}
	auth := trust.Authenticator()
	if _, ok, _ := auth.AuthenticateRequest(leaf(nodeCA)); ok {
		t.Fatal("authenticated before any CA is known")
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	trust.Bind(rotationlisters.NewCertificateAuthorityLister(indexer))
	ca := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: NodeClientCA}}
	ca.Status.TrustBundle = string(nodeCA.CertPEM())
	if err := indexer.Add(ca); err != nil {
		t.Fatal(err)
	}
	resp, ok, err := auth.AuthenticateRequest(leaf(nodeCA))
	if err != nil || !ok || resp.User.GetName() != "system:node:n1" || resp.User.GetGroups()[0] != "system:nodes" {
		t.Fatalf("node certificate: %v %v %+v", ok, err, resp)
	}
	if _, ok, _ := auth.AuthenticateRequest(leaf(otherCA)); ok {
		t.Fatal("a certificate of another CA authenticated")
	}
	// After a rotation the bundle holds the new CA only.
	rotated := ca.DeepCopy()
	rotated.Status.TrustBundle = string(otherCA.CertPEM())
	if err := indexer.Update(rotated); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := auth.AuthenticateRequest(leaf(nodeCA)); ok {
		t.Fatal("a certificate of the rotated-out CA still authenticates")
	}
	if _, ok, _ := auth.AuthenticateRequest(leaf(otherCA)); !ok {
		t.Fatal("the bundle's new CA is not trusted")
	}
}
