// Package validation checks CertificateAuthorities.
package validation

import (
	"path/filepath"
	"time"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"rekey.io/rekey/pkg/apis/rotation"
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

// ValidateCertificateAuthorityUpdate keeps the spec immutable: changing the
// key means a rotation.
func ValidateCertificateAuthorityUpdate(newCA, oldCA *rotation.CertificateAuthority) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newCA.ObjectMeta, &oldCA.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, apimachineryvalidation.ValidateImmutableField(newCA.Spec, oldCA.Spec, field.NewPath("spec"))...)
	return allErrs
}

// ValidateCertificateAuthorityStatusUpdate validates a /status update.
func ValidateCertificateAuthorityStatusUpdate(newCA, oldCA *rotation.CertificateAuthority) field.ErrorList {
	return apimachineryvalidation.ValidateObjectMetaUpdate(&newCA.ObjectMeta, &oldCA.ObjectMeta, field.NewPath("metadata"))
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
