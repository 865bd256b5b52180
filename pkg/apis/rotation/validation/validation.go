// Package validation checks rotation.rekey.io objects (CertificateAuthorities,
// RotatingCredentials, Rotations) and the phase transitions a Rotation may
// ask of each.
package validation

import (
	"crypto/x509"
	"fmt"
	"path/filepath"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/jwtkey"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/keystorepaths"
	"rekey.io/rekey/pkg/strictpem"
)

// MinValidity is the shortest CA lifetime.
const MinValidity = time.Hour

// maxCommonNameLength is the RFC 5280 upper bound for a common name.
const maxCommonNameLength = 64

var keyAlgorithms = []string{
	string(rotation.ECDSAP256), string(rotation.ECDSAP384), string(rotation.RSA2048),
	string(rotation.RSA3072), string(rotation.RSA4096), string(rotation.Ed25519),
}

// ValidateCertificateAuthority validates a new CertificateAuthority.
func ValidateCertificateAuthority(ca *rotation.CertificateAuthority) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&ca.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	ks := spec.Child("keyStore")
	switch ca.Spec.KeyStore.Type {
	case rotation.KeyStoreEtcd, rotation.KeyStorePKCS11:
		if ca.Spec.CommonName == "" {
			allErrs = append(allErrs, field.Required(spec.Child("commonName"), "the CA certificate's subject common name"))
		}
	case rotation.KeyStoreFile:
	default:
		allErrs = append(allErrs, field.NotSupported(ks.Child("type"), ca.Spec.KeyStore.Type, []string{"Etcd", "File", "PKCS11"}))
	}
	if len(ca.Spec.CommonName) > maxCommonNameLength {
		allErrs = append(allErrs, field.TooLong(spec.Child("commonName"), "" /*unused*/, maxCommonNameLength))
	}
	if !contains(keyAlgorithms, string(ca.Spec.KeyAlgorithm)) {
		allErrs = append(allErrs, field.NotSupported(spec.Child("keyAlgorithm"), ca.Spec.KeyAlgorithm, keyAlgorithms))
	}
	if ca.Spec.Validity.Duration < MinValidity {
		allErrs = append(allErrs, field.Invalid(spec.Child("validity"), ca.Spec.Validity.Duration.String(), "must be at least 1h"))
	}
	allErrs = append(allErrs, validatePublish(ca.Spec.Publish, spec.Child("publish"))...)
	allErrs = append(allErrs, validateRotationPolicy(ca.Spec.Rotation, spec.Child("rotation"))...)
	allErrs = append(allErrs, validatePurpose(&ca.Spec, spec)...)
	if ca.Spec.KeyStore.Type != rotation.KeyStoreFile && ca.Spec.KeyStore.File != nil {
		allErrs = append(allErrs, field.Forbidden(ks.Child("file"), "only for type File"))
	}
	if ca.Spec.KeyStore.Type != rotation.KeyStorePKCS11 && ca.Spec.KeyStore.Pkcs11 != nil {
		allErrs = append(allErrs, field.Forbidden(ks.Child("pkcs11"), "only for type PKCS11"))
	}
	switch ca.Spec.KeyStore.Type {
	case rotation.KeyStoreFile:
		f := ca.Spec.KeyStore.File
		if f == nil {
			allErrs = append(allErrs, field.Required(ks.Child("file"), "certFile and keyFile of the CA to adopt"))
			break
		}
		allErrs = append(allErrs, absolutePath(ks.Child("file", "certFile"), f.CertFile)...)
		allErrs = append(allErrs, absolutePath(ks.Child("file", "keyFile"), f.KeyFile)...)
	case rotation.KeyStorePKCS11:
		p := ca.Spec.KeyStore.Pkcs11
		if p == nil {
			allErrs = append(allErrs, field.Required(ks.Child("pkcs11"), "modulePath, tokenLabel and pinFile"))
			break
		}
		allErrs = append(allErrs, absolutePath(ks.Child("pkcs11", "modulePath"), p.ModulePath)...)
		allErrs = append(allErrs, absolutePath(ks.Child("pkcs11", "pinFile"), p.PINFile)...)
		if p.TokenLabel == "" {
			allErrs = append(allErrs, field.Required(ks.Child("pkcs11", "tokenLabel"), ""))
		}
		if ca.Spec.KeyAlgorithm == rotation.Ed25519 {
			allErrs = append(allErrs, field.Invalid(spec.Child("keyAlgorithm"), ca.Spec.KeyAlgorithm, "the PKCS11 key store does not support Ed25519"))
		}
	}
	return allErrs
}

// ValidateKeyStorePaths refuses a key store that names a PKCS#11 module,
// CA file or PIN file the server's allow-lists do not hold. Loading a
// module runs its code in rekey-apiserver, and a file path is a read of
// the server's file system, so neither is taken from an object alone.
func ValidateKeyStorePaths(ca *rotation.CertificateAuthority, allowed keystorepaths.Allowed) field.ErrorList {
	var allErrs field.ErrorList
	ks := field.NewPath("spec", "keyStore")
	if f := ca.Spec.KeyStore.File; f != nil {
		for name, p := range map[string]string{"certFile": f.CertFile, "keyFile": f.KeyFile} {
			if err := allowed.CheckFile(p); err != nil && p != "" {
				allErrs = append(allErrs, field.Forbidden(ks.Child("file", name), err.Error()))
			}
		}
	}
	if p := ca.Spec.KeyStore.Pkcs11; p != nil {
		if err := allowed.CheckModule(p.ModulePath); err != nil && p.ModulePath != "" {
			allErrs = append(allErrs, field.Forbidden(ks.Child("pkcs11", "modulePath"), err.Error()))
		}
		if err := allowed.CheckFile(p.PINFile); err != nil && p.PINFile != "" {
			allErrs = append(allErrs, field.Forbidden(ks.Child("pkcs11", "pinFile"), err.Error()))
		}
	}
	return allErrs
}

// ValidateCertificateAuthorityUpdate keeps the spec immutable but for
// publish and rotation: changing the key means a rotation, while where the
// bundle goes and how a rotation paces itself are tuning an operator may
// change at any time (on the built-in CAs too).
func ValidateCertificateAuthorityUpdate(newCA, oldCA *rotation.CertificateAuthority) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newCA.ObjectMeta, &oldCA.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateImmutableCASpec(&newCA.Spec, &oldCA.Spec, field.NewPath("spec"))...)
	allErrs = append(allErrs, validatePublish(newCA.Spec.Publish, field.NewPath("spec", "publish"))...)
	allErrs = append(allErrs, validateRotationPolicy(newCA.Spec.Rotation, field.NewPath("spec", "rotation"))...)
	// legacyPublicKeys and publish may change: what they may hold is
	// checked again, as on create.
	return append(allErrs, validatePurpose(&newCA.Spec, field.NewPath("spec"))...)
}

// immutableCA is what an error on a CA's fixed fields says to do instead.
const immutableCA = "field is immutable: the CA's key and certificate were made from it; create another CertificateAuthority to change it"

// validateImmutableCASpec names each fixed field that changed, with its
// value where that is a scalar (never a Go struct: the message is read by
// a person at kubectl).
func validateImmutableCASpec(newSpec, oldSpec *rotation.CertificateAuthoritySpec, f *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if newSpec.CommonName != oldSpec.CommonName {
		allErrs = append(allErrs, field.Invalid(f.Child("commonName"), newSpec.CommonName, immutableCA))
	}
	if newSpec.KeyAlgorithm != oldSpec.KeyAlgorithm {
		allErrs = append(allErrs, field.Invalid(f.Child("keyAlgorithm"), string(newSpec.KeyAlgorithm), immutableCA))
	}
	if newSpec.Validity != oldSpec.Validity {
		allErrs = append(allErrs, field.Invalid(f.Child("validity"), newSpec.Validity.Duration.String(), immutableCA))
	}
	ks, oks, kf := newSpec.KeyStore, oldSpec.KeyStore, f.Child("keyStore")
	if ks.Type != oks.Type {
		allErrs = append(allErrs, field.Invalid(kf.Child("type"), string(ks.Type), immutableCA))
	}
	if !apiequality.Semantic.DeepEqual(ks.File, oks.File) {
		allErrs = append(allErrs, field.Forbidden(kf.Child("file"), immutableCA))
	}
	if !apiequality.Semantic.DeepEqual(ks.Pkcs11, oks.Pkcs11) {
		allErrs = append(allErrs, field.Forbidden(kf.Child("pkcs11"), immutableCA))
	}
	if newSpec.Purpose != oldSpec.Purpose {
		allErrs = append(allErrs, field.Invalid(f.Child("purpose"), string(newSpec.Purpose),
			"field is immutable: a key signs certificates or service-account tokens for its whole life; create another CertificateAuthority for the other purpose"))
	}
	allErrs = append(allErrs, validateImmutableTokenKeys(newSpec.ServiceAccountTokens, oldSpec.ServiceAccountTokens, f.Child("serviceAccountTokens"))...)
	// A field added to the spec later is fixed too until it is named above.
	n, o := *newSpec, *oldSpec
	n.CommonName, n.KeyAlgorithm, n.Validity, n.KeyStore, n.Publish, n.Rotation = "", "", metav1.Duration{}, rotation.KeyStore{}, nil, nil
	o.CommonName, o.KeyAlgorithm, o.Validity, o.KeyStore, o.Publish, o.Rotation = "", "", metav1.Duration{}, rotation.KeyStore{}, nil, nil
	n.Purpose, n.ServiceAccountTokens, o.Purpose, o.ServiceAccountTokens = "", nil, "", nil
	if !apiequality.Semantic.DeepEqual(n, o) {
		allErrs = append(allErrs, field.Forbidden(f, immutableCA))
	}
	return allErrs
}

// Upper bounds of spec.rotation. A longer trust propagation keeps a
// rotation Preparing (the old CA signing) for longer than any bundle
// refresh needs; a longer renewal window leaves old certificates pending
// for days after the new CA signs.
const (
	MaxTrustPropagation = 24 * time.Hour
	MaxRenewalWindow    = 7 * 24 * time.Hour
)

// validateRotationPolicy checks spec.rotation's durations: unset (the
// default applies), or 0s up to their bounds.
func validateRotationPolicy(p *rotation.RotationPolicy, fldPath *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	var allErrs field.ErrorList
	check := func(d *metav1.Duration, name, most string, limit time.Duration) {
		if d == nil {
			return
		}
		if d.Duration < 0 || d.Duration > limit {
			allErrs = append(allErrs, field.Invalid(fldPath.Child(name), d.Duration.String(), "must be between 0s and "+most))
		}
	}
	check(p.TrustPropagation, "trustPropagation", "24h", MaxTrustPropagation)
	check(p.RenewalWindow, "renewalWindow", "168h (7 days)", MaxRenewalWindow)
	return allErrs
}

func validatePublish(p *rotation.Publish, fldPath *field.Path) field.ErrorList {
	if p == nil || p.ConfigMaps == nil {
		return nil
	}
	var allErrs field.ErrorList
	cm := fldPath.Child("configMaps")
	if p.ConfigMaps.Name != "" {
		for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(p.ConfigMaps.Name, false) {
			allErrs = append(allErrs, field.Invalid(cm.Child("name"), p.ConfigMaps.Name, msg))
		}
	}
	for i, ns := range p.ConfigMaps.Namespaces {
		for _, msg := range apimachineryvalidation.ValidateNamespaceName(ns, false) {
			allErrs = append(allErrs, field.Invalid(cm.Child("namespaces").Index(i), ns, msg))
		}
	}
	if len(p.ConfigMaps.Namespaces) == 0 && p.ConfigMaps.NamespaceSelector == nil {
		allErrs = append(allErrs, field.Required(cm, "namespaces or namespaceSelector"))
	}
	if sel := p.ConfigMaps.NamespaceSelector; sel != nil {
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, cm.Child("namespaceSelector"))...)
	}
	return allErrs
}

// ValidateCertificateAuthorityStatusUpdate validates a /status update. Only
// rekey's controllers write it (the storage refuses anyone else first); the
// checks keep the controllers honest too.
func ValidateCertificateAuthorityStatusUpdate(newCA, oldCA *rotation.CertificateAuthority) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newCA.ObjectMeta, &oldCA.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, ValidateCertificateAuthorityStatus(&newCA.Status, field.NewPath("status"))...)
}

var phases = []string{string(rotation.PhaseNone), string(rotation.PhasePreparing), string(rotation.PhasePrepared),
	string(rotation.PhaseCompleting), string(rotation.PhaseCompleted)}

// ValidateCertificateAuthorityStatus checks what status may hold: a known
// phase, CA certificates that parse, plain key IDs, a trust bundle of
// certificates only, and bounded conditions.
func ValidateCertificateAuthorityStatus(status *rotation.CertificateAuthorityStatus, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if !contains(phases, string(status.Phase)) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("phase"), status.Phase, phases))
	}
	for name, c := range map[string]*rotation.CACertificate{"current": status.Current, "previous": status.Previous, "next": status.Next} {
		if c == nil {
			continue
		}
		p := fldPath.Child(name)
		if err := signing.ValidateKeyID(c.KeyID); c.KeyID != "" && err != nil {
			allErrs = append(allErrs, field.Invalid(p.Child("keyID"), c.KeyID, err.Error()))
		}
		if len(c.TokenKeyID) > jwtkey.MaxKeyIDLength {
			allErrs = append(allErrs, field.TooLong(p.Child("tokenKeyID"), "" /*unused*/, jwtkey.MaxKeyIDLength))
		}
		if c.TokensExpireTime != nil && name != "previous" {
			allErrs = append(allErrs, field.Forbidden(p.Child("tokensExpireTime"), "only the previous key's tokens expire while a rotation waits"))
		}
		if _, err := parseCertificates(c.Certificate, 1); err != nil {
			allErrs = append(allErrs, field.Invalid(p.Child("certificate"), "<certificate>", err.Error()))
		}
	}
	if status.TrustBundle != "" {
		if _, err := parseCertificates(status.TrustBundle, maxTrustBundleCertificates); err != nil {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("trustBundle"), "<bundle>", err.Error()))
		}
	}
	if status.PendingRenewal < 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("pendingRenewal"), status.PendingRenewal, "must not be negative"))
	}
	if len(status.PendingRenewals) > MaxPendingListed {
		allErrs = append(allErrs, field.TooMany(fldPath.Child("pendingRenewals"), len(status.PendingRenewals), MaxPendingListed))
	}
	if t := status.Trust; t != nil {
		p := fldPath.Child("trust")
		if t.Consumers < 0 || t.Waiting < 0 || t.Waiting > t.Consumers {
			allErrs = append(allErrs, field.Invalid(p.Child("waiting"), t.Waiting, "must be between 0 and trust.consumers"))
		}
		if len(t.WaitingFor) > MaxPendingListed {
			allErrs = append(allErrs, field.TooMany(p.Child("waitingFor"), len(t.WaitingFor), MaxPendingListed))
		}
		if len(t.Unpublished) > maxUnpublished {
			allErrs = append(allErrs, field.TooMany(p.Child("unpublished"), len(t.Unpublished), maxUnpublished))
		}
		for i, u := range t.Unpublished {
			if len(u) > MaxUnpublishedLength {
				allErrs = append(allErrs, field.TooLong(p.Child("unpublished").Index(i), "", MaxUnpublishedLength))
			}
		}
	}
	return append(allErrs, ValidateConditions(fldPath.Child("conditions"), status.Conditions)...)
}

// maxUnpublished caps status.trust.unpublished: one entry per publisher
// rekey runs.
const maxUnpublished = 8

// MaxUnpublishedLength caps one entry of status.trust.unpublished (a
// publisher's name and why it lags).
const MaxUnpublishedLength = 1024

// MaxPendingListed caps status.pendingRenewals.
const MaxPendingListed = 20

// MaxConditions caps the conditions of rekey's own kinds.
const MaxConditions = 16

// maxTrustBundleCertificates caps a trust bundle: the current and previous
// CA during rotation, with room for adopted bundles.
const maxTrustBundleCertificates = 16

// maxStatusPEMBytes caps PEM in status before parsing.
const maxStatusPEMBytes = 256 * 1024

// ValidateConditions checks a list of metav1.Conditions: at most
// MaxConditions, each as metav1 validates it.
func ValidateConditions(fldPath *field.Path, conditions []metav1.Condition) field.ErrorList {
	if len(conditions) > MaxConditions {
		return field.ErrorList{field.TooMany(fldPath, len(conditions), MaxConditions)}
	}
	return metav1validation.ValidateConditions(conditions, fldPath)
}

func parseCertificates(data string, maxBlocks int) ([]*x509.Certificate, error) {
	if len(data) > maxStatusPEMBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxStatusPEMBytes)
	}
	return strictpem.Certificates([]byte(data), maxBlocks)
}

func absolutePath(fldPath *field.Path, p string) field.ErrorList {
	if p == "" {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	if !filepath.IsAbs(p) {
		return field.ErrorList{field.Invalid(fldPath, p, "must be an absolute path on the rekey-apiserver host")}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}
