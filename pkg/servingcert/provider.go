// Package servingcert gives rekey-apiserver a serving certificate from a
// CertificateAuthority that rekey itself manages and rotates, keeps the
// caBundle of rekey's APIServices equal to that CA's trust bundle, and
// swaps the certificate without a restart. Installing on a cluster then
// needs no hand-made serving certificate, and no insecureSkipTLSVerify.
package servingcert

import (
	"crypto/x509"
	"sync"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"rekey.io/rekey/pkg/strictpem"
)

// Provider is the serving certificate the generic server's TLS listener
// reads (a dynamiccertificates.CertKeyContentProvider); Set swaps it and
// tells the listener.
type Provider struct {
	mu        sync.Mutex
	certPEM   []byte
	keyPEM    []byte
	cert      *x509.Certificate
	listeners []dynamiccertificates.Listener
}

var _ dynamiccertificates.CertKeyContentProvider = &Provider{}

// NewProvider starts with the certificate the server was configured with
// (served until the CA's first certificate is issued).
func NewProvider(certPEM, keyPEM []byte) *Provider {
	p := &Provider{}
	p.Set(certPEM, keyPEM)
	return p
}

// Name implements dynamiccertificates.CertKeyContentProvider.
func (p *Provider) Name() string { return "rekey-serving-ca" }

// CurrentCertKeyContent implements dynamiccertificates.CertKeyContentProvider.
func (p *Provider) CurrentCertKeyContent() ([]byte, []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.certPEM, p.keyPEM
}

// AddListener implements dynamiccertificates.Notifier.
func (p *Provider) AddListener(l dynamiccertificates.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.listeners = append(p.listeners, l)
}

// Set swaps the certificate and key and tells the listeners.
func (p *Provider) Set(certPEM, keyPEM []byte) {
	var cert *x509.Certificate
	if blocks, err := strictpem.Decode(certPEM, 8); err == nil && len(blocks) > 0 {
		cert, _ = x509.ParseCertificate(blocks[0].Bytes)
	}
	p.mu.Lock()
	p.certPEM, p.keyPEM, p.cert = certPEM, keyPEM, cert
	listeners := append([]dynamiccertificates.Listener(nil), p.listeners...)
	p.mu.Unlock()
	for _, l := range listeners {
		l.Enqueue()
	}
}

// Certificate is the leaf served now (nil if it does not parse).
func (p *Provider) Certificate() *x509.Certificate {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cert
}
