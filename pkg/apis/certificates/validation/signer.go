package validation

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"time"
	"unicode"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"rekey.io/rekey/pkg/apis/certificates"
)

// MinSignerDuration is the shortest certificate lifetime a policy may set.
const MinSignerDuration = 10 * time.Minute

var (
	knownSANTypes  = sets.New(certificates.SANTypeDNS, certificates.SANTypeIP, certificates.SANTypeEmail, certificates.SANTypeURI)
	knownApprovals = sets.New(certificates.ApprovalManual, certificates.ApprovalNodeClient, certificates.ApprovalNodeServing, certificates.ApprovalAttestation)
)

// SignerObjectName is the object name a Signer for signerName must have:
// the signer name with "/" replaced by ":". Since neither part of a valid
// signer name can contain ":", names map one-to-one, and etcd's key
// uniqueness makes signer names unique across Signers.
func SignerObjectName(signerName string) string {
	return strings.Replace(signerName, "/", ":", 1)
}

// ValidateSigner validates a new Signer.
func ValidateSigner(s *certificates.Signer) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&s.ObjectMeta, false, ValidateCertificateSigningRequestName, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	nameErrs := ValidateSignerName(spec.Child("signerName"), s.Spec.SignerName)
	allErrs = append(allErrs, nameErrs...)
	if len(nameErrs) == 0 && s.Name != SignerObjectName(s.Spec.SignerName) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("metadata", "name"), s.Name,
			fmt.Sprintf("must be %q: the signer name with '/' replaced by ':'", SignerObjectName(s.Spec.SignerName))))
	}
	if s.Spec.CertificateAuthorityRef.Name == "" {
		allErrs = append(allErrs, field.Required(spec.Child("certificateAuthorityRef", "name"), "the CertificateAuthority that signs"))
	}
	allErrs = append(allErrs, validatePolicy(spec.Child("policy"), &s.Spec.Policy)...)
	if !knownApprovals.Has(s.Spec.Approval.Mode) {
		allErrs = append(allErrs, field.NotSupported(spec.Child("approval", "mode"), s.Spec.Approval.Mode,
			[]string{string(certificates.ApprovalManual), string(certificates.ApprovalNodeClient), string(certificates.ApprovalNodeServing), string(certificates.ApprovalAttestation)}))
	}
	allErrs = append(allErrs, validateNodeServing(spec.Child("approval", "nodeServing"), &s.Spec.Approval)...)
	allErrs = append(allErrs, validateHostCluster(spec.Child("hostCluster"), &s.Spec)...)
	return allErrs
}

// Bounds of a PodCertificatePolicy.
const (
	maxPodCertificateAllowed = 64
	maxPodCertificateDNS     = 16
	maxTemplateLength        = 253
	// MinPodCertificateDuration is kube-apiserver's floor for a
	// PodCertificateRequest's certificate.
	MinPodCertificateDuration = time.Hour
	// DefaultPodCertificateDuration is a pod certificate's lifetime when the
	// policy names none.
	DefaultPodCertificateDuration = 24 * time.Hour
)

// PodCertificateKeyTypes are the key types a PodCertificateRequest may
// carry (kube-apiserver refuses others).
var PodCertificateKeyTypes = sets.New(
	certificates.PodCertificateKeyRSA3072, certificates.PodCertificateKeyRSA4096,
	certificates.PodCertificateKeyECDSAP256, certificates.PodCertificateKeyECDSAP384, certificates.PodCertificateKeyECDSAP521,
	certificates.PodCertificateKeyED25519,
)

// TemplateVariables are what a PodCertificatePolicy template may use.
var TemplateVariables = []string{"$(namespace)", "$(serviceAccount)", "$(podName)", "$(nodeName)"}

func validateHostCluster(fldPath *field.Path, spec *certificates.SignerSpec) field.ErrorList {
	hc := spec.HostCluster
	if hc == nil {
		return nil
	}
	var allErrs field.ErrorList
	if hc.CertificateSigningRequests && spec.Approval.Mode == certificates.ApprovalAttestation {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("certificateSigningRequests"),
			"approval mode Attestation verifies evidence sent with rekey's own requests; a certificates.k8s.io request carries none"))
	}
	p := hc.PodCertificateRequests
	if p == nil {
		return allErrs
	}
	pcr := fldPath.Child("podCertificateRequests")
	if domain, _, _ := strings.Cut(spec.SignerName, "/"); domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") {
		allErrs = append(allErrs, field.Forbidden(pcr, "kubernetes.io signer names are reserved to Kubernetes for PodCertificateRequests"))
	}
	if len(p.Allowed) == 0 {
		allErrs = append(allErrs, field.Required(pcr.Child("allowed"), "at least one namespace (\"*\" for all) whose service accounts may get a certificate"))
	}
	if len(p.Allowed) > maxPodCertificateAllowed {
		allErrs = append(allErrs, field.TooMany(pcr.Child("allowed"), len(p.Allowed), maxPodCertificateAllowed))
	}
	for i, a := range p.Allowed {
		at := pcr.Child("allowed").Index(i)
		if a.Namespace != "*" {
			for _, msg := range k8svalidation.IsDNS1123Label(a.Namespace) {
				allErrs = append(allErrs, field.Invalid(at.Child("namespace"), a.Namespace, msg+` (or "*" for every namespace)`))
			}
		}
		if len(a.ServiceAccounts) > maxPodCertificateAllowed {
			allErrs = append(allErrs, field.TooMany(at.Child("serviceAccounts"), len(a.ServiceAccounts), maxPodCertificateAllowed))
		}
		for j, sa := range a.ServiceAccounts {
			if sa == "*" {
				continue
			}
			for _, msg := range k8svalidation.IsDNS1123Subdomain(sa) {
				allErrs = append(allErrs, field.Invalid(at.Child("serviceAccounts").Index(j), sa, msg+` (or "*" for every service account)`))
			}
		}
	}
	// What the policy puts into every certificate, spec.policy must allow,
	// else every request would fail.
	sanAllowed := sets.New(spec.Policy.SubjectAltNames.Allowed...)
	if p.SPIFFETrustDomain != "" {
		for _, msg := range k8svalidation.IsDNS1123Subdomain(p.SPIFFETrustDomain) {
			allErrs = append(allErrs, field.Invalid(pcr.Child("spiffeTrustDomain"), p.SPIFFETrustDomain, msg))
		}
		if !sanAllowed.Has(certificates.SANTypeURI) {
			allErrs = append(allErrs, field.Invalid(pcr.Child("spiffeTrustDomain"), p.SPIFFETrustDomain,
				"puts a URI SAN into every certificate: spec.policy.subjectAltNames.allowed must include URI"))
		}
	}
	if len(p.DNSNames) > 0 && !sanAllowed.Has(certificates.SANTypeDNS) {
		allErrs = append(allErrs, field.Invalid(pcr.Child("dnsNames"), p.DNSNames,
			"puts DNS SANs into every certificate: spec.policy.subjectAltNames.allowed must include DNS"))
	}
	if p.CommonName != "" {
		allErrs = append(allErrs, validateTemplate(pcr.Child("commonName"), p.CommonName, 64)...)
	}
	if len(p.DNSNames) > maxPodCertificateDNS {
		allErrs = append(allErrs, field.TooMany(pcr.Child("dnsNames"), len(p.DNSNames), maxPodCertificateDNS))
	}
	for i, t := range p.DNSNames {
		allErrs = append(allErrs, validateTemplate(pcr.Child("dnsNames").Index(i), t, maxTemplateLength)...)
		// With every variable a valid label, the result must be a DNS name.
		for _, msg := range k8svalidation.IsDNS1123Subdomain(ExpandTemplate(t, "a", "a", "a", "a")) {
			allErrs = append(allErrs, field.Invalid(pcr.Child("dnsNames").Index(i), t, msg))
		}
	}
	for i, k := range p.KeyTypes {
		if !PodCertificateKeyTypes.Has(k) {
			allErrs = append(allErrs, field.NotSupported(pcr.Child("keyTypes").Index(i), k, sets.List(PodCertificateKeyTypes)))
		}
	}
	allowed := sets.New(spec.Policy.AllowedUsages...)
	for i, u := range p.Usages {
		if !KnownUsages.Has(u) {
			allErrs = append(allErrs, field.NotSupported(pcr.Child("usages").Index(i), u, knownUsageStrings))
		} else if allowed.Len() > 0 && !allowed.Has(u) {
			allErrs = append(allErrs, field.Invalid(pcr.Child("usages").Index(i), u, "must be among spec.policy.allowedUsages"))
		}
	}
	if d := p.Duration; d != nil {
		if d.Duration < MinPodCertificateDuration {
			allErrs = append(allErrs, field.Invalid(pcr.Child("duration"), d.Duration.String(), "must be at least 1h (kube-apiserver's floor)"))
		} else if d.Duration > spec.Policy.MaxDuration.Duration {
			allErrs = append(allErrs, field.Invalid(pcr.Child("duration"), d.Duration.String(), "may not exceed spec.policy.maxDuration"))
		}
	}
	if spec.Policy.MaxDuration.Duration < MinPodCertificateDuration {
		// The field at fault is spec.policy.maxDuration, outside fldPath.
		allErrs = append(allErrs, field.Invalid(field.NewPath("spec", "policy", "maxDuration"), spec.Policy.MaxDuration.Duration.String(), "must be at least 1h to serve PodCertificateRequests"))
	}
	return allErrs
}

// validateTemplate checks a template's length and that every $( starts a
// known variable.
func validateTemplate(fldPath *field.Path, t string, maxLen int) field.ErrorList {
	var allErrs field.ErrorList
	if len(t) > maxLen {
		allErrs = append(allErrs, field.TooLong(fldPath, "", maxLen))
	}
	return append(allErrs, validateVariables(fldPath, t, TemplateVariables)...)
}

// ExpandTemplate fills a PodCertificatePolicy template.
func ExpandTemplate(t, namespace, serviceAccount, podName, nodeName string) string {
	return strings.NewReplacer("$(namespace)", namespace, "$(serviceAccount)", serviceAccount, "$(podName)", podName, "$(nodeName)", nodeName).Replace(t)
}

// maxAllowList bounds each NodeServing allow-list.
const maxAllowList = 64

func validateNodeServing(fldPath *field.Path, a *certificates.SignerApproval) field.ErrorList {
	ns := a.NodeServing
	if ns == nil {
		return nil
	}
	var allErrs field.ErrorList
	if a.Mode != certificates.ApprovalNodeServing {
		return append(allErrs, field.Forbidden(fldPath, "only with approval mode NodeServing"))
	}
	if len(ns.AllowedDNSSuffixes) > maxAllowList {
		allErrs = append(allErrs, field.TooMany(fldPath.Child("allowedDNSSuffixes"), len(ns.AllowedDNSSuffixes), maxAllowList))
	}
	for i, suffix := range ns.AllowedDNSSuffixes {
		for _, msg := range k8svalidation.IsDNS1123Subdomain(strings.TrimPrefix(suffix, ".")) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("allowedDNSSuffixes").Index(i), suffix, msg))
		}
	}
	if len(ns.AllowedIPPrefixes) > maxAllowList {
		allErrs = append(allErrs, field.TooMany(fldPath.Child("allowedIPPrefixes"), len(ns.AllowedIPPrefixes), maxAllowList))
	}
	for i, prefix := range ns.AllowedIPPrefixes {
		if p, err := netip.ParsePrefix(prefix); err != nil || p.Masked() != p {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("allowedIPPrefixes").Index(i), prefix, "must be a CIDR prefix with no host bits set, such as 10.0.0.0/8 or fd00::/8"))
		}
	}
	return allErrs
}

// ValidateSignerUpdate validates an update: the signer name and CA are fixed.
func ValidateSignerUpdate(newS, oldS *certificates.Signer) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newS.ObjectMeta, &oldS.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateSigner(newS)...)
	spec := field.NewPath("spec")
	allErrs = append(allErrs, apimachineryvalidation.ValidateImmutableField(newS.Spec.SignerName, oldS.Spec.SignerName, spec.Child("signerName"))...)
	// The reference's one field, so that the message shows a name, not a
	// Go struct.
	allErrs = append(allErrs, apimachineryvalidation.ValidateImmutableField(newS.Spec.CertificateAuthorityRef.Name, oldS.Spec.CertificateAuthorityRef.Name, spec.Child("certificateAuthorityRef", "name"))...)
	// A field added to the reference later is fixed too until it is named
	// above: the whole reference, less the fields already compared.
	n, o := newS.Spec.CertificateAuthorityRef, oldS.Spec.CertificateAuthorityRef
	n.Name, o.Name = "", ""
	if !apiequality.Semantic.DeepEqual(n, o) {
		allErrs = append(allErrs, field.Forbidden(spec.Child("certificateAuthorityRef"), "field is immutable"))
	}
	return allErrs
}

// ValidateSignerStatusUpdate validates a /status update (written by rekey's
// controllers only): bounded, well-formed conditions.
func ValidateSignerStatusUpdate(newS, oldS *certificates.Signer) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newS.ObjectMeta, &oldS.ObjectMeta, field.NewPath("metadata"))
	conditions := field.NewPath("status", "conditions")
	if len(newS.Status.Conditions) > MaxConditions {
		return append(allErrs, field.TooMany(conditions, len(newS.Status.Conditions), MaxConditions))
	}
	return append(allErrs, metav1validation.ValidateConditions(newS.Status.Conditions, conditions)...)
}

func validatePolicy(fldPath *field.Path, p *certificates.SignerPolicy) field.ErrorList {
	var allErrs field.ErrorList
	allowed := sets.New(p.AllowedUsages...)
	for i, u := range p.AllowedUsages {
		if !KnownUsages.Has(u) {
			allErrs = append(allErrs, field.NotSupported(fldPath.Child("allowedUsages").Index(i), u, knownUsageStrings))
		}
	}
	for i, u := range p.RequiredUsages {
		if !KnownUsages.Has(u) {
			allErrs = append(allErrs, field.NotSupported(fldPath.Child("requiredUsages").Index(i), u, knownUsageStrings))
		} else if allowed.Len() > 0 && !allowed.Has(u) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("requiredUsages").Index(i), u, "a required usage must also be allowed"))
		}
	}
	if p.MaxDuration.Duration == 0 {
		// Absent (it has no default): say so, not "0s must be at least 10m".
		allErrs = append(allErrs, field.Required(fldPath.Child("maxDuration"), "the longest lifetime the signer grants, at least 10m (e.g. 720h0m0s)"))
	} else if p.MaxDuration.Duration < MinSignerDuration {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("maxDuration"), p.MaxDuration.Duration.String(), "must be at least 10m"))
	}
	if d := p.DefaultDuration; d != nil {
		if d.Duration < MinSignerDuration {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("defaultDuration"), d.Duration.String(), "must be at least 10m"))
		} else if d.Duration > p.MaxDuration.Duration {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("defaultDuration"), d.Duration.String(), "may not exceed maxDuration"))
		}
	}
	for i, t := range p.SubjectAltNames.Allowed {
		if !knownSANTypes.Has(t) {
			allErrs = append(allErrs, field.NotSupported(fldPath.Child("subjectAltNames", "allowed").Index(i), t, []string{"DNS", "IP", "Email", "URI"}))
		}
	}
	if p.SubjectAltNames.RequireDNSOrIP {
		sans := sets.New(p.SubjectAltNames.Allowed...)
		if !sans.Has(certificates.SANTypeDNS) && !sans.Has(certificates.SANTypeIP) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("subjectAltNames", "requireDNSOrIP"), true, "requires DNS or IP among the allowed types"))
		}
	}
	allErrs = append(allErrs, validateCRLDistributionPoints(fldPath.Child("crlDistributionPoints"), p.CRLDistributionPoints)...)
	return allErrs
}

// Bounds of spec.policy.crlDistributionPoints: a few URLs, each short
// enough that every certificate of the signer stays small.
const (
	MaxCRLDistributionPoints      = 4
	MaxCRLDistributionPointLength = 1024
)

// CRLDistributionPointVariables are what a CRL distribution point URL may
// use: the issuing CertificateAuthority's name and its signing key's ID.
var CRLDistributionPointVariables = []string{"$(caName)", "$(keyID)"}

// validateCRLDistributionPoints checks each URL template: at most
// MaxCRLDistributionPointLength ASCII characters, only the known
// variables, and, with them filled in, an absolute http or https URL with a
// host, no user information and no fragment. Relying parties fetch these
// without credentials, and a certificate holds them as IA5 strings.
func validateCRLDistributionPoints(fldPath *field.Path, points []string) field.ErrorList {
	var allErrs field.ErrorList
	if len(points) > MaxCRLDistributionPoints {
		return append(allErrs, field.TooMany(fldPath, len(points), MaxCRLDistributionPoints))
	}
	seen := sets.New[string]()
	for i, t := range points {
		idx := fldPath.Index(i)
		if len(t) > MaxCRLDistributionPointLength {
			allErrs = append(allErrs, field.TooLong(idx, "", MaxCRLDistributionPointLength))
			continue
		}
		if seen.Has(t) {
			allErrs = append(allErrs, field.Duplicate(idx, t))
			continue
		}
		seen.Insert(t)
		if strings.IndexFunc(t, func(r rune) bool { return r > unicode.MaxASCII || unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
			allErrs = append(allErrs, field.Invalid(idx, t, "must be ASCII without spaces or control characters (percent-encode the rest)"))
			continue
		}
		if errs := validateVariables(idx, t, CRLDistributionPointVariables); len(errs) > 0 {
			allErrs = append(allErrs, errs...)
			continue
		}
		// Sample values of the variables' own character set (a CA name is
		// a DNS subdomain, a key ID lower-case letters, digits, '-', '.').
		u, err := url.Parse(ExpandCRLDistributionPoint(t, "ca", "key"))
		switch {
		case err != nil:
			allErrs = append(allErrs, field.Invalid(idx, t, "must be a URL: "+err.Error()))
		case u.Scheme != "http" && u.Scheme != "https":
			allErrs = append(allErrs, field.Invalid(idx, t, "must be an http or https URL"))
		case u.Host == "" || u.Hostname() == "":
			allErrs = append(allErrs, field.Invalid(idx, t, "must name a host"))
		case u.User != nil:
			allErrs = append(allErrs, field.Invalid(idx, t, "must not hold user information (a CRL is fetched without credentials)"))
		case u.Fragment != "" || strings.Contains(t, "#"):
			allErrs = append(allErrs, field.Invalid(idx, t, "must not have a fragment"))
		}
	}
	return allErrs
}

// validateVariables requires every "$(" in t to start one of vars.
func validateVariables(fldPath *field.Path, t string, vars []string) field.ErrorList {
	for rest := t; ; {
		i := strings.Index(rest, "$(")
		if i < 0 {
			return nil
		}
		rest = rest[i:]
		known := false
		for _, v := range vars {
			if strings.HasPrefix(rest, v) {
				known, rest = true, rest[len(v):]
				break
			}
		}
		if !known {
			return field.ErrorList{field.Invalid(fldPath, t, "unknown variable; use "+strings.Join(vars, ", "))}
		}
	}
}

// ExpandCRLDistributionPoint fills a CRL distribution point URL template
// with the issuing CA's name and key ID, each escaped as a path segment
// (both are of URL-safe characters already; the escape keeps it so for a
// File CA's "file:SHA256:…" key ID too).
func ExpandCRLDistributionPoint(t, caName, keyID string) string {
	return strings.NewReplacer("$(caName)", url.PathEscape(caName), "$(keyID)", url.PathEscape(keyID)).Replace(t)
}
