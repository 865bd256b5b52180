package validation

import (
	"encoding/hex"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"rekey.io/rekey/pkg/apis/certificates"
)

// MaxSerialNumberHexLength caps spec.serialNumber: RFC 5280 serial
// numbers are at most 20 octets.
const MaxSerialNumberHexLength = 40

// RevocationReasons are the reasons a Revocation may give, in CRL code
// order.
var RevocationReasons = []certificates.RevocationReason{
	certificates.RevocationReasonUnspecified,
	certificates.RevocationReasonKeyCompromise,
	certificates.RevocationReasonCACompromise,
	certificates.RevocationReasonAffiliationChanged,
	certificates.RevocationReasonSuperseded,
	certificates.RevocationReasonCessationOfOperation,
	certificates.RevocationReasonPrivilegeWithdrawn,
	certificates.RevocationReasonAACompromise,
}

// IsSHA256Hex says whether s is a SHA-256 in hex (64 hex digits, any case).
func IsSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// ValidateRevocationName: a Revocation is named by its certificate's
// SHA-256 in lowercase hex.
func ValidateRevocationName(name string, prefix bool) []string {
	if prefix {
		return []string{"a revocation is named by its certificate's SHA-256; generateName is not supported"}
	}
	if !IsSHA256Hex(name) || strings.ToLower(name) != name {
		return []string{"must be the certificate's SHA-256 in lowercase hex (64 characters)"}
	}
	return nil
}

// ValidateRevocationSpec checks what a client sends: exactly one of
// certificateSHA256 and serialNumber, caName only with serialNumber, and
// one of the RFC 5280 reasons.
func ValidateRevocationSpec(spec *certificates.RevocationSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	shaPath, serialPath := fldPath.Child("certificateSHA256"), fldPath.Child("serialNumber")
	switch {
	case spec.CertificateSHA256 == "" && spec.SerialNumber == "":
		allErrs = append(allErrs, field.Required(fldPath, "exactly one of certificateSHA256 and serialNumber names the certificate to revoke"))
	case spec.CertificateSHA256 != "" && spec.SerialNumber != "":
		allErrs = append(allErrs, field.Forbidden(serialPath, "exactly one of certificateSHA256 and serialNumber may be set"))
	case spec.CertificateSHA256 != "":
		if !IsSHA256Hex(spec.CertificateSHA256) {
			allErrs = append(allErrs, field.Invalid(shaPath, spec.CertificateSHA256, "must be the SHA-256 of the certificate's DER in hex (64 characters)"))
		}
	default:
		if len(spec.SerialNumber) > MaxSerialNumberHexLength {
			allErrs = append(allErrs, field.TooLong(serialPath, "" /*unused*/, MaxSerialNumberHexLength))
		} else if _, err := hex.DecodeString(evenHex(spec.SerialNumber)); err != nil {
			allErrs = append(allErrs, field.Invalid(serialPath, spec.SerialNumber, "must be the certificate's serial number in hex"))
		}
	}
	caPath := fldPath.Child("caName")
	if spec.CAName != "" {
		if spec.SerialNumber == "" {
			allErrs = append(allErrs, field.Forbidden(caPath, "may only be set with serialNumber"))
		} else {
			for _, msg := range k8svalidation.IsDNS1123Subdomain(spec.CAName) {
				allErrs = append(allErrs, field.Invalid(caPath, spec.CAName, msg))
			}
		}
	}
	known := false
	reasons := make([]string, len(RevocationReasons))
	for i, r := range RevocationReasons {
		reasons[i] = string(r)
		known = known || r == spec.Reason
	}
	if !known {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("reason"), spec.Reason, reasons))
	}
	return allErrs
}

func evenHex(s string) string {
	if s == "" {
		return "x" // not hex
	}
	if len(s)%2 == 1 {
		return "0" + s
	}
	return s
}

// ValidateRevocation checks a new Revocation: its name (when the client
// set one; the server names it) and its spec. status is the server's,
// checked by the storage.
func ValidateRevocation(r *certificates.Revocation) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&r.ObjectMeta, false, ValidateRevocationName, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateRevocationSpec(&r.Spec, field.NewPath("spec"))...)
	return allErrs
}

// ValidateRevocationUpdate: a revocation is not changed; only labels and
// annotations may be.
func ValidateRevocationUpdate(r, old *certificates.Revocation) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&r.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	// Field by field, so that the message names the field and its value,
	// not the Go struct of the whole spec.
	spec := field.NewPath("spec")
	allErrs = append(allErrs, apimachineryvalidation.ValidateImmutableField(r.Spec.CertificateSHA256, old.Spec.CertificateSHA256, spec.Child("certificateSHA256"))...)
	allErrs = append(allErrs, apimachineryvalidation.ValidateImmutableField(r.Spec.SerialNumber, old.Spec.SerialNumber, spec.Child("serialNumber"))...)
	allErrs = append(allErrs, apimachineryvalidation.ValidateImmutableField(r.Spec.CAName, old.Spec.CAName, spec.Child("caName"))...)
	allErrs = append(allErrs, apimachineryvalidation.ValidateImmutableField(string(r.Spec.Reason), string(old.Spec.Reason), spec.Child("reason"))...)
	// A field added to the spec later is fixed too until it is named above.
	n, o := r.Spec, old.Spec
	n.CertificateSHA256, n.SerialNumber, n.CAName, n.Reason = "", "", "", ""
	o.CertificateSHA256, o.SerialNumber, o.CAName, o.Reason = "", "", "", ""
	if !apiequality.Semantic.DeepEqual(n, o) {
		allErrs = append(allErrs, field.Forbidden(spec, "field is immutable: a revocation is not changed"))
	}
	if !apiequality.Semantic.DeepEqual(r.Status, old.Status) {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("status"), "set by the server when the revocation is created; a revocation is not changed"))
	}
	return allErrs
}
