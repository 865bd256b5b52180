package plugin

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/strictpem"
)

// keyTypes are what --key-type accepts for --new-key. ECDSA P-256 is the
// default: small, fast, and accepted by every policy (RSA below 2048 bits
// and other curves are refused by every Signer).
var keyTypes = map[string]func() (crypto.Signer, error){
	"ecdsa-p256": func() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) },
	"ecdsa-p384": func() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P384(), rand.Reader) },
	"ecdsa-p521": func() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P521(), rand.Reader) },
	"rsa-2048":   func() (crypto.Signer, error) { return rsa.GenerateKey(rand.Reader, 2048) },
	"rsa-3072":   func() (crypto.Signer, error) { return rsa.GenerateKey(rand.Reader, 3072) },
	"rsa-4096":   func() (crypto.Signer, error) { return rsa.GenerateKey(rand.Reader, 4096) },
	"ed25519": func() (crypto.Signer, error) {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	},
}

func keyTypeNames() []string {
	names := make([]string, 0, len(keyTypes))
	for n := range keyTypes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// maxInputFile bounds what the plugin reads from a key or CSR file: both
// are a few kilobytes.
const maxInputFile = 1 << 20

func readSmallFile(flag, file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxInputFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, file, err)
	}
	if len(data) > maxInputFile {
		return nil, fmt.Errorf("%s %s: larger than %d bytes", flag, file, maxInputFile)
	}
	return data, nil
}

// parsePrivateKeyPEM reads the first private key of a PEM file: PKCS#8
// ("PRIVATE KEY", what --new-key writes), SEC 1 ("EC PRIVATE KEY") or
// PKCS#1 ("RSA PRIVATE KEY"), as openssl writes them. Other blocks (EC
// PARAMETERS before a key) are skipped.
func parsePrivateKeyPEM(flag, file string, data []byte) (crypto.Signer, error) {
	blocks, err := strictpem.Decode(data, 8)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, file, err)
	}
	for _, b := range blocks {
		var key any
		switch b.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		case "ENCRYPTED PRIVATE KEY":
			return nil, fmt.Errorf("%s %s: the key is encrypted; decrypt it first (openssl pkey -in %s -out plain.key)", flag, file, file)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: the %q block does not parse: %w", flag, file, b.Type, err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%s %s: keys of type %T cannot sign a request", flag, file, key)
		}
		return signer, nil
	}
	return nil, fmt.Errorf("%s %s: no PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY block", flag, file)
}

func marshalPrivateKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// writeNewKey writes key to file, created with mode 0600 and never over
// an existing file (O_EXCL): a private key that exists may be the only
// copy of one in use.
func writeNewKey(file string, key crypto.Signer) error {
	data, err := marshalPrivateKeyPEM(key)
	if err != nil {
		return fmt.Errorf("--new-key: encoding the key: %w", err)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("--new-key: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		_ = os.Remove(file)
		return fmt.Errorf("--new-key %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(file)
		return fmt.Errorf("--new-key %s: %w", file, err)
	}
	return nil
}

// subjectAttributes are the attributes --subject accepts, by their short
// names (as openssl and RFC 4514 write them).
var subjectAttributes = []string{"CN", "O", "OU", "C", "L", "ST", "STREET", "POSTALCODE", "SERIALNUMBER"}

// parseSubject reads an RFC 4514-like "CN=alice,O=dev" (a "\," keeps a
// comma in a value) or openssl's "/CN=alice/O=dev".
func parseSubject(s string) (pkix.Name, error) {
	var name pkix.Name
	if strings.TrimSpace(s) == "" {
		return name, nil
	}
	sep := ','
	if strings.HasPrefix(s, "/") {
		sep, s = '/', s[1:]
	}
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case rune(s[i]) == sep:
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(s[i])
		}
	}
	parts = append(parts, cur.String())
	for _, p := range parts {
		attr, value, ok := strings.Cut(p, "=")
		attr = strings.ToUpper(strings.TrimSpace(attr))
		value = strings.TrimSpace(value)
		if !ok || value == "" {
			return name, fmt.Errorf("--subject %q: %q is not ATTRIBUTE=value", s, p)
		}
		switch attr {
		case "CN":
			if name.CommonName != "" {
				return name, fmt.Errorf("--subject %q: two CN attributes", s)
			}
			name.CommonName = value
		case "O":
			name.Organization = append(name.Organization, value)
		case "OU":
			name.OrganizationalUnit = append(name.OrganizationalUnit, value)
		case "C":
			name.Country = append(name.Country, value)
		case "L":
			name.Locality = append(name.Locality, value)
		case "ST":
			name.Province = append(name.Province, value)
		case "STREET":
			name.StreetAddress = append(name.StreetAddress, value)
		case "POSTALCODE":
			name.PostalCode = append(name.PostalCode, value)
		case "SERIALNUMBER":
			name.SerialNumber = value
		default:
			return name, fmt.Errorf("--subject %q: attribute %q is not one of %s", s, attr, strings.Join(subjectAttributes, ", "))
		}
	}
	return name, nil
}

// templateFlags are what a new PKCS#10 request holds: the subject, the
// subject alternative names.
type templateFlags struct {
	subject, cn      string
	orgs, dns, ips   []string
	emails, uris     []string
	usages           []string
	duration         time.Duration
	signer           string
	keyFile, newKey  string
	keyType, csrFile string
}

// hasSubjectFlags says whether any flag that goes into a PKCS#10 request
// the plugin builds was given (they cannot change a --csr file).
func (f *templateFlags) hasSubjectFlags() bool {
	return f.subject != "" || f.cn != "" || len(f.orgs)+len(f.dns)+len(f.ips)+len(f.emails)+len(f.uris) > 0
}

// certificateRequestTemplate is the x509 template the flags describe.
func (f *templateFlags) certificateRequestTemplate() (*x509.CertificateRequest, error) {
	subject, err := parseSubject(f.subject)
	if err != nil {
		return nil, err
	}
	if f.cn != "" {
		if subject.CommonName != "" {
			return nil, fmt.Errorf("--cn %q and the CN of --subject %q: give the common name once", f.cn, f.subject)
		}
		subject.CommonName = f.cn
	}
	subject.Organization = append(subject.Organization, f.orgs...)
	tmpl := &x509.CertificateRequest{Subject: subject, DNSNames: f.dns, EmailAddresses: f.emails}
	for _, s := range f.ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return nil, fmt.Errorf("--ip %q is not an IP address", s)
		}
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	}
	for _, s := range f.uris {
		u, err := url.Parse(s)
		if err != nil || u.Scheme == "" {
			return nil, fmt.Errorf("--uri %q is not an absolute URI", s)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	if subject.CommonName == "" && len(subject.Organization) == 0 && len(tmpl.DNSNames)+len(tmpl.IPAddresses)+len(tmpl.EmailAddresses)+len(tmpl.URIs) == 0 {
		return nil, errors.New("the request names nothing: give --cn (or --subject), and --org, --dns or --ip as the signer's policy needs")
	}
	return tmpl, nil
}

// parseUsages reads --usages: the API's names ("client auth"), with
// dashes for spaces allowed ("client-auth"), in any case.
func parseUsages(in []string) ([]certv1alpha1.KeyUsage, error) {
	var out []certv1alpha1.KeyUsage
	for _, s := range in {
		u := certv1alpha1.KeyUsage(strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), "-", " ")))
		if !slices.Contains(knownUsages, u) {
			names := make([]string, len(knownUsages))
			for i, k := range knownUsages {
				names[i] = string(k)
			}
			return nil, fmt.Errorf("--usages: %q is not a usage; one of %s", s, strings.Join(names, ", "))
		}
		if !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out, nil
}

var knownUsages = []certv1alpha1.KeyUsage{
	certv1alpha1.UsageSigning, certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageContentCommitment,
	certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageKeyAgreement, certv1alpha1.UsageDataEncipherment,
	certv1alpha1.UsageCertSign, certv1alpha1.UsageCRLSign, certv1alpha1.UsageEncipherOnly, certv1alpha1.UsageDecipherOnly,
	certv1alpha1.UsageAny, certv1alpha1.UsageServerAuth, certv1alpha1.UsageClientAuth, certv1alpha1.UsageCodeSigning,
	certv1alpha1.UsageEmailProtection, certv1alpha1.UsageSMIME, certv1alpha1.UsageIPsecEndSystem, certv1alpha1.UsageIPsecTunnel,
	certv1alpha1.UsageIPsecUser, certv1alpha1.UsageTimestamping, certv1alpha1.UsageOCSPSigning, certv1alpha1.UsageMicrosoftSGC,
	certv1alpha1.UsageNetscapeSGC,
}

// expirationSeconds is --duration as spec.expirationSeconds (nil when not
// given: the signer's default duration).
func expirationSeconds(d time.Duration) (*int32, error) {
	if d == 0 {
		return nil, nil
	}
	if d < 10*time.Minute {
		return nil, fmt.Errorf("--duration %s: the shortest a request may ask for is 10m", d)
	}
	if d.Seconds() > math.MaxInt32 {
		return nil, fmt.Errorf("--duration %s: longer than spec.expirationSeconds can hold", d)
	}
	s := int32(d / time.Second)
	return &s, nil
}

// createRequestPEM signs tmpl with key into a PEM PKCS#10 request.
func createRequestPEM(tmpl *x509.CertificateRequest, key crypto.Signer) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, fmt.Errorf("making the PKCS#10 request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// templateOf is a request's subject and subject alternative names, as a
// template for a request of another key (renew --new-key). The subject
// keeps its encoding (RawSubject), so that the new certificate names the
// same subject byte for byte. Extensions other than the subject
// alternative names are left out: rekey ignores them.
func templateOf(req *x509.CertificateRequest) *x509.CertificateRequest {
	return &x509.CertificateRequest{
		RawSubject: req.RawSubject, DNSNames: req.DNSNames, IPAddresses: req.IPAddresses,
		EmailAddresses: req.EmailAddresses, URIs: req.URIs,
	}
}

// keyDescription is "ECDSA P-256", "RSA 2048", "Ed25519".
func keyDescription(pub crypto.PublicKey) string {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		return "ECDSA " + k.Curve.Params().Name
	case *rsa.PublicKey:
		return fmt.Sprintf("RSA %d", k.N.BitLen())
	case ed25519.PublicKey:
		return "Ed25519"
	}
	return fmt.Sprintf("%T", pub)
}

// sameKey says whether a PEM request certifies key's public key.
func sameKey(requestPEM []byte, key crypto.Signer) bool {
	pub, err := requestKeyPEM(requestPEM)()
	return err == nil && signing.PublicKeysEqual(pub, key.Public())
}
