package validation

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

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
	return allErrs
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
	allErrs = append(allErrs, apimachineryvalidation.ValidateImmutableField(newS.Spec.CertificateAuthorityRef, oldS.Spec.CertificateAuthorityRef, spec.Child("certificateAuthorityRef"))...)
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
	if p.MaxDuration.Duration < MinSignerDuration {
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
	return allErrs
}
