package agent

import (
	"crypto"
	"crypto/rand"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base32"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"math"
	"net"
	"sort"
	"strings"
	"time"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
)

// Template is what the agent asks for: the signer, the subject, the SANs
// and the usages. A current certificate that no longer matches it is
// renewed at once.
type Template struct {
	SignerName  string
	Subject     pkix.Name
	DNSNames    []string
	IPAddresses []net.IP
	Usages      []certv1alpha1.KeyUsage
	// NodeClient says the request is a node client certificate's, which
	// a signer in NodeClient mode approves by the requester's permission.
	NodeClient bool
}

// ClientTemplate is a node's client certificate request (seed 001):
// CN system:node:<name>, O system:nodes, no SANs.
func ClientTemplate(signerName, nodeName string) Template {
	return Template{
		SignerName: signerName,
		Subject:    pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
		Usages:     []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth},
		NodeClient: true,
	}
}

// ServingTemplate is a node's serving certificate request: CN
// system:node:<name>, O system:nodes, the node's DNS names and IPs as
// SANs, the serving usages.
func ServingTemplate(signerName, nodeName string, dnsNames []string, ips []net.IP) Template {
	return Template{
		SignerName:  signerName,
		Subject:     pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
		DNSNames:    append([]string(nil), dnsNames...),
		IPAddresses: append([]net.IP(nil), ips...),
		Usages:      []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageServerAuth},
	}
}

// CSR encodes a PKCS#10 request for key.
func (t Template) CSR(key crypto.Signer) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: t.Subject, DNSNames: t.DNSNames, IPAddresses: t.IPAddresses,
	}, key)
	if err != nil {
		return nil, fmt.Errorf("creating the certificate request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// RequestName derives the request's name from the public key and the
// template, so that an agent that restarts while it waits finds its own
// request instead of making another (kubernetes#69471), and a new key or a
// changed template makes a new one.
func (t Template) RequestName(pub crypto.PublicKey) (string, error) {
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	h := sha512.New()
	write := func(parts ...string) {
		for _, p := range parts {
			// Length-prefixed, so that no two different templates write
			// the same bytes.
			fmt.Fprintf(h, "%d:%s;", len(p), p)
		}
	}
	write(string(spki), t.SignerName, t.Subject.String())
	dns := append([]string(nil), t.DNSNames...)
	sort.Strings(dns)
	write(dns...)
	ips := make([]string, len(t.IPAddresses))
	for i, ip := range t.IPAddresses {
		ips[i] = ip.String()
	}
	sort.Strings(ips)
	write(ips...)
	usages := make([]string, len(t.Usages))
	for i, u := range t.Usages {
		usages[i] = string(u)
	}
	sort.Strings(usages)
	write(usages...)
	sum := h.Sum(nil)
	return "node-csr-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:20])), nil
}

// Matches says whether cert is what the template asks for: subject, SANs
// (as sets) and the signer's issuer are not checked here; the signer name
// is not in the certificate, so a template change of signer is noticed by
// the caller.
func (t Template) Matches(cert *x509.Certificate) bool {
	if cert.Subject.CommonName != t.Subject.CommonName || !sameStrings(cert.Subject.Organization, t.Subject.Organization) {
		return false
	}
	if !sameStrings(cert.DNSNames, t.DNSNames) {
		return false
	}
	a := make([]string, len(cert.IPAddresses))
	for i, ip := range cert.IPAddresses {
		a[i] = ip.String()
	}
	b := make([]string, len(t.IPAddresses))
	for i, ip := range t.IPAddresses {
		b[i] = ip.String()
	}
	return sameStrings(a, b)
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = append([]string(nil), a...), append([]string(nil), b...)
	sort.Strings(a)
	sort.Strings(b)
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// RotationDeadline is when a certificate should be renewed: at a point
// between 70% and 90% of its lifetime, so that nodes given certificates at
// once do not all renew at once. jitter is in [0, 1); nil takes it from the
// certificate itself (CertificateJitter), so that every caller (the run
// loop, exec-credential) computes the same deadline for one certificate.
func RotationDeadline(cert *x509.Certificate, jitter func() float64) time.Time {
	j := CertificateJitter(cert)
	if jitter != nil {
		j = jitter()
	}
	lifetime := cert.NotAfter.Sub(cert.NotBefore)
	fraction := 0.7 + 0.2*math.Min(math.Max(j, 0), 1)
	return cert.NotBefore.Add(time.Duration(float64(lifetime) * fraction))
}

// CertificateJitter is a number in [0, 1) drawn from the certificate's
// bytes: random across certificates, fixed for one.
func CertificateJitter(cert *x509.Certificate) float64 {
	sum := sha512.Sum512(cert.Raw)
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
}
