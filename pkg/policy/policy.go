// Package policy decides whether a signer may sign a request and what goes
// into the certificate: the enforcement of a Signer's declared policy.
package policy

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/message"
)

// Violation is a request that breaks one rule of a signer's policy. Rule
// names the policy field, so a requester can see which rule it broke.
type Violation struct {
	Rule    string
	Message string
	// Reason is the Failed condition's reason; empty means
	// SignerPolicyViolation.
	Reason string
}

// ReasonWeakPublicKey is the Failed reason for a request whose key is too
// weak to certify.
const ReasonWeakPublicKey = "WeakPublicKey"

func (v *Violation) Error() string { return v.Rule + ": " + v.Message }

func violation(rule, format string, args ...any) *Violation {
	return &Violation{Rule: rule, Message: fmt.Sprintf(format, args...)}
}

// Decision is what the certificate will carry.
type Decision struct {
	KeyUsage    x509.KeyUsage
	ExtKeyUsage []x509.ExtKeyUsage
	// Requested is the lifetime asked for (or the policy default); Duration
	// is the lifetime granted: the smaller of Requested and maxDuration.
	Requested time.Duration
	Duration  time.Duration
}

var oidBasicConstraints = asn1.ObjectIdentifier{2, 5, 29, 19}

// Evaluate checks a parsed request against a policy. It returns a
// *Violation when a rule is broken.
func Evaluate(p *certv1alpha1.SignerPolicy, spec *certv1alpha1.CertificateSigningRequestSpec, req *x509.CertificateRequest) (Decision, error) {
	var d Decision
	if err := checkPublicKey(req); err != nil {
		return d, err
	}
	if err := checkUsages(p, spec.Usages); err != nil {
		return d, err
	}
	if err := checkNoCA(req); err != nil {
		return d, err
	}
	if err := checkPrivilegedGroup(spec.Usages, req); err != nil {
		return d, err
	}
	if err := checkSubject(&p.Subject, spec.Username, req); err != nil {
		return d, err
	}
	if err := checkSANs(&p.SubjectAltNames, req); err != nil {
		return d, err
	}
	ku, eku, err := KeyUsages(spec.Usages)
	if err != nil {
		return d, err
	}
	d.KeyUsage, d.ExtKeyUsage = ku, eku
	d.Requested = p.MaxDuration.Duration
	if p.DefaultDuration != nil {
		d.Requested = p.DefaultDuration.Duration
	}
	if spec.ExpirationSeconds != nil {
		d.Requested = time.Duration(*spec.ExpirationSeconds) * time.Second
	}
	d.Duration = min(d.Requested, p.MaxDuration.Duration)
	return d, nil
}

func checkUsages(p *certv1alpha1.SignerPolicy, usages []certv1alpha1.KeyUsage) error {
	if len(p.AllowedUsages) > 0 {
		for _, u := range usages {
			if !slices.Contains(p.AllowedUsages, u) {
				return violation("policy.allowedUsages", "usage %q is not allowed; allowed: %s", u, joinUsages(p.AllowedUsages))
			}
		}
	}
	for _, u := range p.RequiredUsages {
		if !slices.Contains(usages, u) {
			return violation("policy.requiredUsages", "usage %q is required; required: %s", u, joinUsages(p.RequiredUsages))
		}
	}
	return nil
}

func joinUsages(us []certv1alpha1.KeyUsage) string {
	s := make([]string, len(us))
	for i, u := range us {
		s[i] = fmt.Sprintf("%q", u)
	}
	return strings.Join(s, ", ")
}

// checkNoCA refuses requests that ask for a CA certificate: the CA bit is
// never set, and asking for it is an error rather than silently dropped.
func checkNoCA(req *x509.CertificateRequest) error {
	for _, ext := range req.Extensions {
		if !ext.Id.Equal(oidBasicConstraints) {
			continue
		}
		var bc struct {
			IsCA       bool `asn1:"optional"`
			MaxPathLen int  `asn1:"optional,default:-1"`
		}
		if _, err := asn1.Unmarshal(ext.Value, &bc); err != nil {
			return violation("policy.caBit", "the basicConstraints extension does not parse")
		}
		if bc.IsCA {
			return violation("policy.caBit", "CA certificates are never issued")
		}
	}
	return nil
}

// checkPublicKey refuses keys too weak to certify, in every policy: RSA
// below 2048 bits and elliptic curves other than P-256, P-384 and P-521.
func checkPublicKey(req *x509.CertificateRequest) error {
	weak := func(format string, args ...any) error {
		v := violation("publicKey", format, args...)
		v.Reason = ReasonWeakPublicKey
		return v
	}
	switch k := req.PublicKey.(type) {
	case *rsa.PublicKey:
		if bits := k.N.BitLen(); bits < MinRSABits {
			return weak("RSA key of %d bits; at least %d are required", bits, MinRSABits)
		}
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
		default:
			return weak("ECDSA curve %s is not allowed; use P-256, P-384 or P-521", k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
	default:
		return weak("public key type %T is not supported", req.PublicKey)
	}
	return nil
}

// MinRSABits is the smallest RSA key any policy certifies.
const MinRSABits = 2048

// checkPrivilegedGroup refuses system:masters in any certificate that could
// authenticate a client, whatever the policy says (see package
// subjectrestriction, which refuses the same requests at create).
func checkPrivilegedGroup(usages []certv1alpha1.KeyUsage, req *x509.CertificateRequest) error {
	names := make([]string, len(usages))
	for i, u := range usages {
		names[i] = string(u)
	}
	if ClientAuthUsable(names) && NamesPrivilegedGroup(req.Subject.Organization) {
		return violation("subject.organizations", "group %q is never certified for client authentication", PrivilegedGroup)
	}
	return nil
}

func checkSubject(p *certv1alpha1.SubjectPolicy, requester string, req *x509.CertificateRequest) error {
	cn := req.Subject.CommonName
	if p.CommonNamePrefix != "" && (!strings.HasPrefix(cn, p.CommonNamePrefix) || len(cn) == len(p.CommonNamePrefix)) {
		return violation("policy.subject.commonNamePrefix", "common name %s must start with %q", message.Quote(cn), p.CommonNamePrefix)
	}
	if p.CommonNameIsRequester && cn != requester {
		return violation("policy.subject.commonNameIsRequester", "common name %s must be the requesting user's name %q", message.Quote(cn), requester)
	}
	if p.ForbidOtherAttributes {
		if attr := otherSubjectAttribute(req); attr != "" {
			return violation("policy.subject.forbidOtherAttributes", "subject attribute %s is not allowed; only the common name and organizations are", attr)
		}
	}
	orgs := req.Subject.Organization
	if len(p.Organizations) > 0 && !sameSet(orgs, p.Organizations) {
		return violation("policy.subject.organizations", "organizations must be exactly %q, got %s", p.Organizations, message.Quote(fmt.Sprintf("%q", orgs)))
	}
	for _, o := range orgs {
		if slices.Contains(p.ForbiddenOrganizations, o) {
			return violation("policy.subject.forbiddenOrganizations", "organization %s is not allowed", message.Quote(o))
		}
	}
	return nil
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	sort.Strings(x)
	sort.Strings(y)
	return slices.Equal(x, y)
}

// otherSubjectAttribute names the first subject attribute that is neither
// the common name nor an organization, or returns "".
func otherSubjectAttribute(req *x509.CertificateRequest) string {
	for _, atv := range req.Subject.Names {
		if !atv.Type.Equal(oidCommonName) && !atv.Type.Equal(oidOrganization) {
			return attributeName(atv.Type)
		}
	}
	return ""
}

// attributeShortNames are the RFC 4514 short names of the subject
// attributes crypto/x509 parses (and the e-mail address and serial number
// openssl -subj writes), for messages: "OU" means something to the person
// who typed -subj "/CN=a/OU=b", 2.5.4.11 does not.
var attributeShortNames = map[string]string{
	"2.5.4.3": "CN", "2.5.4.5": "serialNumber", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST",
	"2.5.4.9": "STREET", "2.5.4.10": "O", "2.5.4.11": "OU", "2.5.4.17": "postalCode",
	"1.2.840.113549.1.9.1": "emailAddress", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}

// attributeName is the short name of a subject attribute, with its OID in
// parentheses; an attribute without a short name is its OID alone.
func attributeName(oid asn1.ObjectIdentifier) string {
	if name, ok := attributeShortNames[oid.String()]; ok {
		return fmt.Sprintf("%s (%s)", name, oid)
	}
	return oid.String()
}

var (
	oidCommonName   = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidOrganization = asn1.ObjectIdentifier{2, 5, 4, 10}
)

func checkSANs(p *certv1alpha1.SubjectAltNamePolicy, req *x509.CertificateRequest) error {
	if !p.AllowWildcardDNSNames {
		for _, name := range req.DNSNames {
			if strings.Contains(name, "*") {
				return violation("policy.subjectAltNames.allowWildcardDNSNames", "wildcard DNS name %s is not allowed", message.Quote(name))
			}
		}
	}
	present := map[certv1alpha1.SubjectAltNameType]int{
		certv1alpha1.SANTypeDNS:   len(req.DNSNames),
		certv1alpha1.SANTypeIP:    len(req.IPAddresses),
		certv1alpha1.SANTypeEmail: len(req.EmailAddresses),
		certv1alpha1.SANTypeURI:   len(req.URIs),
	}
	for _, t := range []certv1alpha1.SubjectAltNameType{certv1alpha1.SANTypeDNS, certv1alpha1.SANTypeIP, certv1alpha1.SANTypeEmail, certv1alpha1.SANTypeURI} {
		if present[t] > 0 && !slices.Contains(p.Allowed, t) {
			return violation("policy.subjectAltNames.allowed", "%s subject alternative names are not allowed", t)
		}
	}
	if p.RequireDNSOrIP && present[certv1alpha1.SANTypeDNS]+present[certv1alpha1.SANTypeIP] == 0 {
		return violation("policy.subjectAltNames.requireDNSOrIP", "at least one DNS or IP subject alternative name is required")
	}
	return nil
}

var keyUsages = map[certv1alpha1.KeyUsage]x509.KeyUsage{
	certv1alpha1.UsageSigning:           x509.KeyUsageDigitalSignature,
	certv1alpha1.UsageDigitalSignature:  x509.KeyUsageDigitalSignature,
	certv1alpha1.UsageContentCommitment: x509.KeyUsageContentCommitment,
	certv1alpha1.UsageKeyEncipherment:   x509.KeyUsageKeyEncipherment,
	certv1alpha1.UsageKeyAgreement:      x509.KeyUsageKeyAgreement,
	certv1alpha1.UsageDataEncipherment:  x509.KeyUsageDataEncipherment,
	certv1alpha1.UsageCertSign:          x509.KeyUsageCertSign,
	certv1alpha1.UsageCRLSign:           x509.KeyUsageCRLSign,
	certv1alpha1.UsageEncipherOnly:      x509.KeyUsageEncipherOnly,
	certv1alpha1.UsageDecipherOnly:      x509.KeyUsageDecipherOnly,
}

var extKeyUsages = map[certv1alpha1.KeyUsage]x509.ExtKeyUsage{
	certv1alpha1.UsageAny:             x509.ExtKeyUsageAny,
	certv1alpha1.UsageServerAuth:      x509.ExtKeyUsageServerAuth,
	certv1alpha1.UsageClientAuth:      x509.ExtKeyUsageClientAuth,
	certv1alpha1.UsageCodeSigning:     x509.ExtKeyUsageCodeSigning,
	certv1alpha1.UsageEmailProtection: x509.ExtKeyUsageEmailProtection,
	certv1alpha1.UsageSMIME:           x509.ExtKeyUsageEmailProtection,
	certv1alpha1.UsageIPsecEndSystem:  x509.ExtKeyUsageIPSECEndSystem,
	certv1alpha1.UsageIPsecTunnel:     x509.ExtKeyUsageIPSECTunnel,
	certv1alpha1.UsageIPsecUser:       x509.ExtKeyUsageIPSECUser,
	certv1alpha1.UsageTimestamping:    x509.ExtKeyUsageTimeStamping,
	certv1alpha1.UsageOCSPSigning:     x509.ExtKeyUsageOCSPSigning,
	certv1alpha1.UsageMicrosoftSGC:    x509.ExtKeyUsageMicrosoftServerGatedCrypto,
	certv1alpha1.UsageNetscapeSGC:     x509.ExtKeyUsageNetscapeServerGatedCrypto,
}

// KeyUsages maps API usages to X.509 key usages and extended key usages.
// "cert sign" and "crl sign" are refused: no certificate rekey issues is a CA.
func KeyUsages(usages []certv1alpha1.KeyUsage) (x509.KeyUsage, []x509.ExtKeyUsage, error) {
	var ku x509.KeyUsage
	var eku []x509.ExtKeyUsage
	for _, u := range usages {
		if u == certv1alpha1.UsageCertSign || u == certv1alpha1.UsageCRLSign {
			return 0, nil, violation("policy.caBit", "usage %q would make a CA certificate, which is never issued", u)
		}
		if k, ok := keyUsages[u]; ok {
			ku |= k
		} else if e, ok := extKeyUsages[u]; ok {
			if !slices.Contains(eku, e) {
				eku = append(eku, e)
			}
		} else {
			return 0, nil, violation("spec.usages", "unknown usage %q", u)
		}
	}
	return ku, eku, nil
}
