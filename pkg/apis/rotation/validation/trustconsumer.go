package validation

import (
	"regexp"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"rekey.io/rekey/pkg/apis/rotation"
)

// Bounds of a TrustConsumer. A consumer is one trust file or process;
// sixteen CAs is more than any one verifies with, and eight certificates
// per CA more than a rotation puts in a bundle (current, next, previous).
const (
	MaxTrustConsumerCAs  = 16
	MaxHeldFingerprints  = 8
	fingerprintFormatMsg = `must be "SHA256:" and 64 lowercase hex digits, as in a CA's status`
)

// fingerprintPattern is what signing.Fingerprint writes: "SHA256:" and the
// lowercase hex SHA-256 of the certificate's DER.
var fingerprintPattern = regexp.MustCompile(`^SHA256:[0-9a-f]{64}$`)

// ValidateTrustConsumer checks a new TrustConsumer (spec.reporter already
// set by the server from the requesting user).
func ValidateTrustConsumer(tc *rotation.TrustConsumer) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&tc.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	errs = append(errs, validateTrustConsumerSpec(&tc.Spec, field.NewPath("spec"))...)
	return append(errs, validateTrustConsumerStatus(&tc.Status, &tc.Spec, field.NewPath("status"))...)
}

// ValidateTrustConsumerUpdate checks a change of spec: the CAs may change,
// the reporter may not (it alone reports for the consumer).
func ValidateTrustConsumerUpdate(tc, old *rotation.TrustConsumer) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&tc.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	errs = append(errs, validateTrustConsumerSpec(&tc.Spec, field.NewPath("spec"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(tc.Spec.Reporter, old.Spec.Reporter, field.NewPath("spec", "reporter"))...)
	return append(errs, validateTrustConsumerStatus(&tc.Status, &tc.Spec, field.NewPath("status"))...)
}

// ValidateTrustConsumerStatusUpdate checks a report.
func ValidateTrustConsumerStatusUpdate(tc, old *rotation.TrustConsumer) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&tc.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(errs, validateTrustConsumerStatus(&tc.Status, &tc.Spec, field.NewPath("status"))...)
}

func validateTrustConsumerSpec(spec *rotation.TrustConsumerSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	cas := fldPath.Child("certificateAuthorities")
	switch n := len(spec.CertificateAuthorities); {
	case n == 0:
		errs = append(errs, field.Required(cas, "the names of the CertificateAuthorities the consumer verifies with (1 to 16)"))
	case n > MaxTrustConsumerCAs:
		errs = append(errs, field.TooMany(cas, n, MaxTrustConsumerCAs))
	}
	seen := map[string]bool{}
	for i, name := range spec.CertificateAuthorities {
		errs = append(errs, caName(cas.Index(i), name)...)
		if seen[name] {
			errs = append(errs, field.Duplicate(cas.Index(i), name))
		}
		seen[name] = true
	}
	if spec.Reporter == "" {
		errs = append(errs, field.Required(fldPath.Child("reporter"), "set by the server from the registering user"))
	}
	return errs
}

// validateTrustConsumerStatus checks holds against spec: one entry per CA,
// only for CAs the spec names (a report on any other CA would be counted
// by nothing), fingerprints in the CA status's format.
func validateTrustConsumerStatus(status *rotation.TrustConsumerStatus, spec *rotation.TrustConsumerSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	named := map[string]bool{}
	for _, n := range spec.CertificateAuthorities {
		named[n] = true
	}
	holds := fldPath.Child("holds")
	seen := map[string]bool{}
	for i, h := range status.Holds {
		p := holds.Index(i)
		ca := p.Child("certificateAuthority")
		switch {
		case h.CertificateAuthority == "":
			errs = append(errs, field.Required(ca, ""))
		case seen[h.CertificateAuthority]:
			errs = append(errs, field.Duplicate(ca, h.CertificateAuthority))
		case !named[h.CertificateAuthority]:
			errs = append(errs, field.Invalid(ca, h.CertificateAuthority, "not in spec.certificateAuthorities: a consumer reports only on the CAs it names"))
		}
		seen[h.CertificateAuthority] = true
		fps := p.Child("fingerprints")
		if len(h.Fingerprints) > MaxHeldFingerprints {
			errs = append(errs, field.TooMany(fps, len(h.Fingerprints), MaxHeldFingerprints))
			continue
		}
		seenFP := map[string]bool{}
		for j, fp := range h.Fingerprints {
			if !fingerprintPattern.MatchString(fp) {
				errs = append(errs, field.Invalid(fps.Index(j), fp, fingerprintFormatMsg))
			} else if seenFP[fp] {
				errs = append(errs, field.Duplicate(fps.Index(j), fp))
			}
			seenFP[fp] = true
		}
	}
	return errs
}

func caName(fldPath *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(fldPath, "a CertificateAuthority name")}
	}
	var errs field.ErrorList
	for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(name, false) {
		errs = append(errs, field.Invalid(fldPath, name, msg))
	}
	return errs
}
