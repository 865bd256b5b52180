// Package validation checks CertificateSigningRequests and Signers. Every
// error names the field it is about; every size is capped before PEM or
// ASN.1 parsing so that a hostile body costs the server no more than the cap.
package validation

import (
	"bytes"
	"fmt"
	"strings"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apis/message"
)

const (
	// MaxRequestBytes caps spec.request. A PKCS#10 request with an RSA-4096
	// key and a generous set of SANs is a few KiB; 64 KiB leaves room for
	// attestation evidence carried alongside while refusing abuse.
	MaxRequestBytes = 64 * 1024
	// MaxCertificateBytes caps status.certificate (leaf plus intermediates).
	MaxCertificateBytes = 256 * 1024
	// MaxCertificateBlocks caps the number of PEM blocks in status.certificate.
	MaxCertificateBlocks = 16
	// MinExpirationSeconds is the shortest lifetime a request may ask for.
	MinExpirationSeconds = 600
	// maxSignerPathLength lets "<domain>/<path>" fit the 571 characters of seed 003.
	maxSignerPathLength = utilvalidation.DNS1123SubdomainMaxLength + utilvalidation.DNS1123LabelMaxLength + 1
	// MaxConditionMessageLength caps free-form condition text; rekey's
	// own writers cap theirs with package message.
	MaxConditionMessageLength = message.MaxLength
	// maxConditionReasonLength caps condition reasons.
	maxConditionReasonLength = 1024
	// MaxConditions caps status.conditions. With the other caps, a request
	// stays well under etcd's 1.5 MiB value limit, so an oversized write is
	// a 422 naming the field rather than a 500 from storage.
	MaxConditions = 16
)

// KnownUsages is the set of usages a request may name.
var KnownUsages = sets.New(
	certificates.UsageSigning, certificates.UsageDigitalSignature, certificates.UsageContentCommitment,
	certificates.UsageKeyEncipherment, certificates.UsageKeyAgreement, certificates.UsageDataEncipherment,
	certificates.UsageCertSign, certificates.UsageCRLSign, certificates.UsageEncipherOnly,
	certificates.UsageDecipherOnly, certificates.UsageAny, certificates.UsageServerAuth,
	certificates.UsageClientAuth, certificates.UsageCodeSigning, certificates.UsageEmailProtection,
	certificates.UsageSMIME, certificates.UsageIPsecEndSystem, certificates.UsageIPsecTunnel,
	certificates.UsageIPsecUser, certificates.UsageTimestamping, certificates.UsageOCSPSigning,
	certificates.UsageMicrosoftSGC, certificates.UsageNetscapeSGC,
)

var knownUsageStrings = func() []string {
	out := make([]string, 0, KnownUsages.Len())
	for _, u := range sets.List(KnownUsages) {
		out = append(out, string(u))
	}
	return out
}()

// ValidateCertificateSigningRequestName allows any name that is a valid
// path segment: the node agent names requests after a key hash. The
// prefix argument is the ObjectMeta name-validation convention (a
// generateName prefix).
func ValidateCertificateSigningRequestName(name string, prefix bool) []string {
	var errs []string
	if !prefix && (name == "." || name == "..") {
		errs = append(errs, fmt.Sprintf("may not be '%s'", name))
	}
	for _, illegal := range []string{"/", "%"} {
		if strings.Contains(name, illegal) {
			errs = append(errs, fmt.Sprintf("may not contain '%s'", illegal))
		}
	}
	return errs
}

// ValidateCertificateSigningRequestCreate validates a new request.
func ValidateCertificateSigningRequestCreate(csr *certificates.CertificateSigningRequest) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&csr.ObjectMeta, false, ValidateCertificateSigningRequestName, field.NewPath("metadata"))
	allErrs = append(allErrs, validateSpec(&csr.Spec, field.NewPath("spec"))...)
	allErrs = append(allErrs, validateConditions(field.NewPath("status", "conditions"), csr.Status.Conditions)...)
	allErrs = append(allErrs, ValidateCertificate(field.NewPath("status", "certificate"), csr.Status.Certificate)...)
	return allErrs
}

// ValidateCertificateSigningRequestUpdate validates an update of the main
// resource: metadata only, spec and status are immutable there.
func ValidateCertificateSigningRequestUpdate(newCSR, oldCSR *certificates.CertificateSigningRequest) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newCSR.ObjectMeta, &oldCSR.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateStatusUpdate(newCSR, oldCSR)...)
	return allErrs
}

// ValidateCertificateSigningRequestStatusUpdate validates a /status update.
func ValidateCertificateSigningRequestStatusUpdate(newCSR, oldCSR *certificates.CertificateSigningRequest) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newCSR.ObjectMeta, &oldCSR.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateStatusUpdate(newCSR, oldCSR)...)
	allErrs = append(allErrs, forbidApprovalChange(newCSR, oldCSR, "/status")...)
	return allErrs
}

// ValidateCertificateSigningRequestApprovalUpdate validates an /approval update.
func ValidateCertificateSigningRequestApprovalUpdate(newCSR, oldCSR *certificates.CertificateSigningRequest) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newCSR.ObjectMeta, &oldCSR.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateStatusUpdate(newCSR, oldCSR)...)
	if !bytes.Equal(newCSR.Status.Certificate, oldCSR.Status.Certificate) {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("status", "certificate"), "the certificate can only be set through the /status subresource"))
	}
	return allErrs
}

func validateSpec(spec *certificates.CertificateSigningRequestSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	// The signer name is checked first: everything else about a request is
	// judged by the signer it names.
	allErrs = append(allErrs, ValidateSignerName(fldPath.Child("signerName"), spec.SignerName)...)
	if req, err := ParseCSR(spec.Request); err == nil {
		allErrs = append(allErrs, validateRequestText(fldPath.Child("request"), req)...)
	} else {
		if len(spec.Request) == 0 {
			allErrs = append(allErrs, field.Required(fldPath.Child("request"), "a PEM-encoded PKCS#10 certificate request is required"))
		} else if err == errRequestTooLarge {
			allErrs = append(allErrs, field.TooLong(fldPath.Child("request"), "" /*unused*/, MaxRequestBytes))
		} else {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("request"), "<request bytes>", err.Error()))
		}
	}
	if spec.ExpirationSeconds != nil && *spec.ExpirationSeconds < MinExpirationSeconds {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("expirationSeconds"), *spec.ExpirationSeconds,
			fmt.Sprintf("may not specify a duration less than %d seconds (10 minutes)", MinExpirationSeconds)))
	}
	allErrs = append(allErrs, validateUsages(fldPath.Child("usages"), spec.Usages)...)
	return allErrs
}

func validateUsages(fldPath *field.Path, usages []certificates.KeyUsage) field.ErrorList {
	var allErrs field.ErrorList
	if len(usages) == 0 {
		return append(allErrs, field.Required(fldPath, "usages must be provided"))
	}
	seen := sets.New[certificates.KeyUsage]()
	for i, u := range usages {
		switch {
		case !KnownUsages.Has(u):
			allErrs = append(allErrs, field.NotSupported(fldPath.Index(i), u, knownUsageStrings))
		case seen.Has(u):
			allErrs = append(allErrs, field.Duplicate(fldPath.Index(i), u))
		}
		seen.Insert(u)
	}
	return allErrs
}

// ValidateSignerName checks that a signer name is "<domain>/<path>": exactly
// one slash, a domain of at least two DNS-1123 labels, and a path of
// DNS-1123 subdomains separated by dots, 571 characters at most.
func ValidateSignerName(fldPath *field.Path, signerName string) field.ErrorList {
	var allErrs field.ErrorList
	if signerName == "" {
		return append(allErrs, field.Required(fldPath, "a signer name such as 'example.com/my-signer' is required"))
	}
	domain, signerPath, ok := strings.Cut(signerName, "/")
	if !ok || strings.Contains(signerPath, "/") {
		return append(allErrs, field.Invalid(fldPath, signerName, "must be a fully qualified domain and path of the form 'example.com/signer-name' with exactly one '/'"))
	}
	if len(domain) > utilvalidation.DNS1123SubdomainMaxLength {
		allErrs = append(allErrs, field.TooLong(fldPath, "" /*unused*/, utilvalidation.DNS1123SubdomainMaxLength))
	}
	labels := strings.Split(domain, ".")
	for _, label := range labels {
		if errs := utilvalidation.IsDNS1123Label(label); len(errs) > 0 {
			allErrs = append(allErrs, field.Invalid(fldPath, signerName, fmt.Sprintf("domain label %q: %s", label, strings.Join(errs, "; "))))
			break // further labels would only repeat the same complaint
		}
	}
	if len(labels) < 2 {
		allErrs = append(allErrs, field.Invalid(fldPath, signerName, "the domain part must have at least two segments separated by dots"))
	}
	if signerPath == "" {
		return append(allErrs, field.Invalid(fldPath, signerName, "the path after '/' must not be empty"))
	}
	if len(signerPath) > maxSignerPathLength {
		return append(allErrs, field.TooLong(fldPath, "" /*unused*/, utilvalidation.DNS1123SubdomainMaxLength+1+maxSignerPathLength))
	}
	for _, segment := range strings.Split(signerPath, ".") {
		if errs := utilvalidation.IsDNS1123Subdomain(segment); len(errs) > 0 {
			allErrs = append(allErrs, field.Invalid(fldPath, signerName, fmt.Sprintf("path segment %q: %s", segment, strings.Join(errs, "; "))))
			break
		}
	}
	return allErrs
}

func validateConditions(fldPath *field.Path, conditions []certificates.CertificateSigningRequestCondition) field.ErrorList {
	var allErrs field.ErrorList
	if len(conditions) > MaxConditions {
		// Nothing else is looked at: the list itself is the problem.
		return append(allErrs, field.TooMany(fldPath, len(conditions), MaxConditions))
	}
	seen := sets.New[certificates.RequestConditionType]()
	for i, c := range conditions {
		idx := fldPath.Index(i)
		if c.Type == "" {
			allErrs = append(allErrs, field.Required(idx.Child("type"), ""))
		} else if errs := utilvalidation.IsQualifiedName(string(c.Type)); len(errs) > 0 {
			// ASCII only: no invisible or look-alike characters that would
			// show as "Approved" without being it.
			allErrs = append(allErrs, field.Invalid(idx.Child("type"), c.Type, strings.Join(errs, "; ")))
		} else if seen.Has(c.Type) {
			allErrs = append(allErrs, field.Duplicate(idx.Child("type"), c.Type))
		}
		seen.Insert(c.Type)
		switch c.Type {
		case certificates.CertificateApproved, certificates.CertificateDenied, certificates.CertificateFailed:
			if c.Status != metav1.ConditionTrue {
				allErrs = append(allErrs, field.NotSupported(idx.Child("status"), c.Status, []string{string(metav1.ConditionTrue)}))
			}
		default:
			switch c.Status {
			case metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown:
			case "":
				allErrs = append(allErrs, field.Required(idx.Child("status"), ""))
			default:
				allErrs = append(allErrs, field.NotSupported(idx.Child("status"), c.Status,
					[]string{string(metav1.ConditionTrue), string(metav1.ConditionFalse), string(metav1.ConditionUnknown)}))
			}
		}
		if len(c.Reason) > maxConditionReasonLength {
			allErrs = append(allErrs, field.TooLong(idx.Child("reason"), "" /*unused*/, maxConditionReasonLength))
		}
		if len(c.Message) > MaxConditionMessageLength {
			allErrs = append(allErrs, field.TooLong(idx.Child("message"), "" /*unused*/, MaxConditionMessageLength))
		}
	}
	if seen.Has(certificates.CertificateApproved) && seen.Has(certificates.CertificateDenied) {
		allErrs = append(allErrs, field.Invalid(fldPath, certificates.CertificateDenied, "Approved and Denied conditions are mutually exclusive"))
	}
	return allErrs
}

func validateStatusUpdate(newCSR, oldCSR *certificates.CertificateSigningRequest) field.ErrorList {
	fldPath := field.NewPath("status")
	allErrs := validateConditions(fldPath.Child("conditions"), newCSR.Status.Conditions)
	for _, t := range []certificates.RequestConditionType{certificates.CertificateApproved, certificates.CertificateDenied, certificates.CertificateFailed, certificates.CertificateAttested} {
		if certificates.GetCondition(oldCSR, t) != nil && certificates.GetCondition(newCSR, t) == nil {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child("conditions"), fmt.Sprintf("updates may not remove a condition of type %q", t)))
		}
	}
	// Attested is what the server verified at create; no client writes it.
	if oldC, newC := certificates.GetCondition(oldCSR, certificates.CertificateAttested), certificates.GetCondition(newCSR, certificates.CertificateAttested); newC != nil &&
		(oldC == nil || oldC.Status != newC.Status || oldC.Reason != newC.Reason || oldC.Message != newC.Message) {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("conditions"),
			fmt.Sprintf("a condition of type %q is recorded by the server when the request is created; updates may not add or change it", certificates.CertificateAttested)))
	}
	certPath := fldPath.Child("certificate")
	switch {
	case len(oldCSR.Status.Certificate) > 0:
		if !bytes.Equal(newCSR.Status.Certificate, oldCSR.Status.Certificate) {
			allErrs = append(allErrs, field.Forbidden(certPath, "updates may not modify or remove a certificate once it is set"))
		}
	case len(newCSR.Status.Certificate) > 0:
		if !certificates.IsApproved(newCSR) {
			allErrs = append(allErrs, field.Forbidden(certPath, "a certificate may only be set on an Approved request"))
		} else if certificates.IsFailed(newCSR) {
			allErrs = append(allErrs, field.Forbidden(certPath, "a certificate may not be set on a Failed request"))
		}
		allErrs = append(allErrs, ValidateCertificate(certPath, newCSR.Status.Certificate)...)
	}
	return allErrs
}

func forbidApprovalChange(newCSR, oldCSR *certificates.CertificateSigningRequest, via string) field.ErrorList {
	var allErrs field.ErrorList
	for _, t := range []certificates.RequestConditionType{certificates.CertificateApproved, certificates.CertificateDenied} {
		oldC, newC := certificates.GetCondition(oldCSR, t), certificates.GetCondition(newCSR, t)
		if oldC == nil && newC != nil {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("status", "conditions"),
				fmt.Sprintf("a condition of type %q can only be added through the /approval subresource, not %s", t, via)))
		} else if oldC != nil && newC != nil && (oldC.Reason != newC.Reason || oldC.Message != newC.Message) {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("status", "conditions"),
				fmt.Sprintf("a condition of type %q can only be changed through the /approval subresource, not %s", t, via)))
		}
	}
	return allErrs
}

// ValidateCertificate checks status.certificate: one or more CERTIFICATE PEM
// blocks without headers, each a parseable X.509 certificate, with only
// whitespace around and between them.
func ValidateCertificate(fldPath *field.Path, data []byte) field.ErrorList {
	if len(data) == 0 {
		return nil
	}
	if _, err := ParseCertificateChain(data); err != nil {
		if err == errCertificateTooLarge {
			return field.ErrorList{field.TooLong(fldPath, "" /*unused*/, MaxCertificateBytes)}
		}
		return field.ErrorList{field.Invalid(fldPath, "<certificate data>", err.Error())}
	}
	return nil
}
