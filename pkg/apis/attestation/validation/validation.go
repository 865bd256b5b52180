// Package validation checks attestation.rekey.io objects; every error names
// its field.
package validation

import (
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"rekey.io/rekey/pkg/apis/attestation"
	certvalidation "rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/attest"
	"rekey.io/rekey/pkg/strictpem"
)

// Limits.
const (
	maxBundleBytes     = 256 << 10
	maxBundleCerts     = 64
	maxAllowedEKs      = 10000
	maxSignerNames     = 16
	minChallengeLife   = 30 * time.Second
	maxChallengeLife   = time.Hour
	maxAttemptsPerHour = 1000
)

// ValidateAttestationPolicy checks a policy.
func ValidateAttestationPolicy(p *attestation.AttestationPolicy) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&p.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	s := &p.Spec
	errs = append(errs, validateBundle(spec.Child("ekRootCertificates"), s.EKRootCertificates)...)
	errs = append(errs, validateBundle(spec.Child("ekIntermediateCertificates"), s.EKIntermediateCertificates)...)
	if s.EKRootCertificates == "" && len(s.AllowedEKPublicKeyHashes) == 0 {
		errs = append(errs, field.Required(spec.Child("ekRootCertificates"), "a policy trusts EKs by certificate root, by allowedEKPublicKeyHashes, or both"))
	}
	if len(s.AllowedEKPublicKeyHashes) > maxAllowedEKs {
		errs = append(errs, field.TooMany(spec.Child("allowedEKPublicKeyHashes"), len(s.AllowedEKPublicKeyHashes), maxAllowedEKs))
	} else {
		seen := sets.New[string]()
		for i, h := range s.AllowedEKPublicKeyHashes {
			f := spec.Child("allowedEKPublicKeyHashes").Index(i)
			if !isHexSHA256(h) {
				errs = append(errs, field.Invalid(f, h, "must be 64 lowercase hex characters (SHA-256 of the EK's DER SubjectPublicKeyInfo)"))
			} else if seen.Has(h) {
				errs = append(errs, field.Duplicate(f, h))
			}
			seen.Insert(h)
		}
	}
	errs = append(errs, validatePCRPolicy(spec.Child("pcrPolicy"), &s.PCRPolicy)...)
	if len(s.SignerNames) == 0 {
		errs = append(errs, field.Required(spec.Child("signerNames"), "name the signers whose Attestation approval this policy gates"))
	}
	if len(s.SignerNames) > maxSignerNames {
		errs = append(errs, field.TooMany(spec.Child("signerNames"), len(s.SignerNames), maxSignerNames))
	}
	for i, n := range s.SignerNames {
		errs = append(errs, certvalidation.ValidateSignerName(spec.Child("signerNames").Index(i), n)...)
	}
	if d := s.ChallengeLifetime; d == nil || d.Duration < minChallengeLife || d.Duration > maxChallengeLife {
		errs = append(errs, field.Invalid(spec.Child("challengeLifetime"), s.ChallengeLifetime, fmt.Sprintf("must be between %s and %s", minChallengeLife, maxChallengeLife)))
	}
	if a := s.MaxAttemptsPerEKPerHour; a == nil || *a < 1 || *a > maxAttemptsPerHour {
		errs = append(errs, field.Invalid(spec.Child("maxAttemptsPerEKPerHour"), s.MaxAttemptsPerEKPerHour, fmt.Sprintf("must be between 1 and %d", maxAttemptsPerHour)))
	}
	return errs
}

// ValidateAttestationPolicyUpdate checks an updated policy like a new one.
func ValidateAttestationPolicyUpdate(p, old *attestation.AttestationPolicy) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&p.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(errs, ValidateAttestationPolicy(p)...)
}

func validateBundle(f *field.Path, bundle string) field.ErrorList {
	if bundle == "" {
		return nil
	}
	if len(bundle) > maxBundleBytes {
		return field.ErrorList{field.TooLong(f, "", maxBundleBytes)}
	}
	certs, err := strictpem.Certificates([]byte(bundle), maxBundleCerts)
	if err != nil {
		return field.ErrorList{field.Invalid(f, "<PEM>", err.Error())}
	}
	for i, c := range certs {
		if !c.IsCA {
			return field.ErrorList{field.Invalid(f, "<PEM>", fmt.Sprintf("certificate %d (%s) is not a CA certificate", i, c.Subject))}
		}
	}
	return nil
}

func validatePCRPolicy(f *field.Path, p *attestation.PCRPolicy) field.ErrorList {
	var errs field.ErrorList
	if p.Bank != "sha256" {
		errs = append(errs, field.NotSupported(f.Child("bank"), p.Bank, []string{"sha256"}))
	}
	switch p.Mode {
	case attestation.PCRModeFixed, attestation.PCRModeTrustOnFirstUse:
	default:
		errs = append(errs, field.NotSupported(f.Child("mode"), p.Mode, []attestation.PCRMode{attestation.PCRModeFixed, attestation.PCRModeTrustOnFirstUse}))
	}
	if len(p.Selection) == 0 {
		errs = append(errs, field.Required(f.Child("selection"), "a quote must cover at least one PCR"))
	}
	selected := sets.New[int32]()
	for i, idx := range p.Selection {
		if idx < 0 || idx > 23 {
			errs = append(errs, field.Invalid(f.Child("selection").Index(i), idx, "must be a PCR index from 0 to 23"))
		} else if selected.Has(idx) {
			errs = append(errs, field.Duplicate(f.Child("selection").Index(i), idx))
		}
		selected.Insert(idx)
	}
	valued := sets.New[int32]()
	for i, v := range p.Values {
		vf := f.Child("values").Index(i)
		if !selected.Has(v.Index) {
			errs = append(errs, field.Invalid(vf.Child("index"), v.Index, "is not in selection"))
		} else if valued.Has(v.Index) {
			errs = append(errs, field.Duplicate(vf.Child("index"), v.Index))
		}
		valued.Insert(v.Index)
		if !isHexSHA256(v.Value) {
			errs = append(errs, field.Invalid(vf.Child("value"), v.Value, "must be 64 lowercase hex characters"))
		}
	}
	switch {
	case p.Mode == attestation.PCRModeFixed && !valued.Equal(selected):
		errs = append(errs, field.Invalid(f.Child("values"), len(p.Values), "mode Fixed needs exactly one value for every selected PCR"))
	case p.Mode == attestation.PCRModeTrustOnFirstUse && len(p.Values) > 0:
		errs = append(errs, field.Forbidden(f.Child("values"), "mode TrustOnFirstUse records each node's first values; set mode Fixed to give values"))
	}
	return errs
}

// isHexSHA256: 64 lowercase hex characters, one spelling per hash so that
// allow-list entries compare as strings.
func isHexSHA256(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && len(s) == 64 && strings.ToLower(s) == s
}

// ValidateNodeAttestation checks what a node posts: its name is the
// node's, and its EK and AK parse and pass the server's checks, so that a
// malformed area is refused at the write with the field named.
func ValidateNodeAttestation(n *attestation.NodeAttestation) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&n.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(errs, validateNodeAttestationSpec(field.NewPath("spec"), &n.Spec)...)
}

// ValidateNodeAttestationUpdate: the node may post a new EK or AK (its
// TPM replaced, its AK lost); the server challenges again.
func ValidateNodeAttestationUpdate(n, old *attestation.NodeAttestation) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&n.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(errs, validateNodeAttestationSpec(field.NewPath("spec"), &n.Spec)...)
}

func validateNodeAttestationSpec(f *field.Path, s *attestation.NodeAttestationSpec) field.ErrorList {
	var errs field.ErrorList
	if s.PolicyName == "" {
		errs = append(errs, field.Required(f.Child("policyName"), "name the AttestationPolicy to attest under"))
	} else {
		for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(s.PolicyName, false) {
			errs = append(errs, field.Invalid(f.Child("policyName"), s.PolicyName, msg))
		}
	}
	if len(s.EKCertificate) > 0 {
		if _, err := attest.ParseEKCertificate(s.EKCertificate); err != nil {
			errs = append(errs, field.Invalid(f.Child("ekCertificate"), "<DER>", err.Error()))
		}
	}
	if len(s.EKPublic) == 0 {
		errs = append(errs, field.Required(f.Child("ekPublic"), "the EK's public area (TPMT_PUBLIC)"))
	} else if _, _, err := attest.ParseEKPublic(s.EKPublic); err != nil {
		errs = append(errs, field.Invalid(f.Child("ekPublic"), "<TPMT_PUBLIC>", err.Error()))
	}
	if len(s.AKPublic) == 0 {
		errs = append(errs, field.Required(f.Child("akPublic"), "the attestation key's public area (TPMT_PUBLIC)"))
	} else if _, err := attest.ParseAK(s.AKPublic); err != nil {
		errs = append(errs, field.Invalid(f.Child("akPublic"), "<TPMT_PUBLIC>", err.Error()))
	}
	return errs
}

// ValidateNodeAttestationStatusUpdate checks what rekey writes.
func ValidateNodeAttestationStatusUpdate(n, old *attestation.NodeAttestation) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&n.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	f := field.NewPath("status")
	st := &n.Status
	switch st.Phase {
	case "", attestation.NodeAttestationChallenged, attestation.NodeAttestationAttested, attestation.NodeAttestationRefused:
	default:
		errs = append(errs, field.NotSupported(f.Child("phase"), st.Phase, []attestation.NodeAttestationPhase{attestation.NodeAttestationChallenged, attestation.NodeAttestationAttested, attestation.NodeAttestationRefused}))
	}
	if st.EKFingerprint != "" && !isHexSHA256(st.EKFingerprint) {
		errs = append(errs, field.Invalid(f.Child("ekFingerprint"), st.EKFingerprint, "must be 64 lowercase hex characters"))
	}
	if c := st.Challenge; c != nil && (len(c.CredentialBlob) == 0 || len(c.CredentialBlob) > 1024 || len(c.EncryptedSecret) == 0 || len(c.EncryptedSecret) > 1024) {
		errs = append(errs, field.Invalid(f.Child("challenge"), "<challenge>", "credentialBlob and encryptedSecret must each hold 1 to 1024 bytes"))
	}
	if len(st.Conditions) > 16 {
		errs = append(errs, field.TooMany(f.Child("conditions"), len(st.Conditions), 16))
	} else {
		errs = append(errs, metav1validation.ValidateConditions(st.Conditions, f.Child("conditions"))...)
	}
	return errs
}
