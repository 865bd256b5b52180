package validation

import (
	"fmt"
	"strings"
	"time"
	"unicode"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/jwtkey"
)

// Bounds of spec.serviceAccountTokens.
const (
	// MinMaxTokenExpiration is kube-apiserver's own minimum of
	// --service-account-max-token-expiration (and of the signer's
	// Metadata): it refuses a signer that caps tokens shorter.
	MinMaxTokenExpiration = 10 * time.Minute
	// MaxMaxTokenExpiration is a year: a rotation's Complete waits this
	// long after the new key began to sign.
	MaxMaxTokenExpiration = 8760 * time.Hour
	// MaxIssuerLength caps spec.serviceAccountTokens.issuer.
	MaxIssuerLength = 1024
	// MaxLegacyPublicKeys caps spec.serviceAccountTokens.legacyPublicKeys:
	// a migration brings one or a few key files' keys.
	MaxLegacyPublicKeys = 8
)

var purposes = []string{string(rotation.PurposeCertificates), string(rotation.PurposeServiceAccountTokens)}

// tokenKeyAlgorithms are the key algorithms a token key may have: those
// jwtkey signs with (ES256, RS256), which every kube-apiserver verifies.
var tokenKeyAlgorithms = []rotation.KeyAlgorithm{rotation.ECDSAP256, rotation.RSA2048, rotation.RSA3072, rotation.RSA4096}

// validatePurpose checks spec.purpose and what it requires: a
// ServiceAccountTokens key signs JWTs kube-apiserver verifies (ES256 or
// RS256), rotates (so never a File CA), is nobody's CA (so never
// published as a bundle) and has spec.serviceAccountTokens; a
// Certificates CA has no spec.serviceAccountTokens.
func validatePurpose(spec *rotation.CertificateAuthoritySpec, f *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch spec.Purpose {
	case rotation.PurposeCertificates:
		if spec.ServiceAccountTokens != nil {
			allErrs = append(allErrs, field.Forbidden(f.Child("serviceAccountTokens"), "only with purpose ServiceAccountTokens"))
		}
	case rotation.PurposeServiceAccountTokens:
		// An algorithm no CA may have is refused as not supported already.
		if contains(keyAlgorithms, string(spec.KeyAlgorithm)) && !isTokenKeyAlgorithm(spec.KeyAlgorithm) {
			allErrs = append(allErrs, field.Invalid(f.Child("keyAlgorithm"), string(spec.KeyAlgorithm),
				"a ServiceAccountTokens key signs ES256 (ECDSA-P256) or RS256 (RSA-2048, RSA-3072, RSA-4096), what kube-apiserver verifies"))
		}
		if spec.KeyStore.Type == rotation.KeyStoreFile {
			allErrs = append(allErrs, field.Invalid(f.Child("keyStore", "type"), string(spec.KeyStore.Type),
				"a ServiceAccountTokens key must rotate, and rekey does not rotate a key it reads from files: use Etcd or PKCS11 (a key file's public key goes in spec.serviceAccountTokens.legacyPublicKeys)"))
		}
		if spec.Publish != nil {
			allErrs = append(allErrs, field.Forbidden(f.Child("publish"),
				"a ServiceAccountTokens key is no CA anyone may trust: its public keys reach kube-apiserver through rekey-agent jwt-signer, never as a CA bundle"))
		}
		allErrs = append(allErrs, validateTokenKeys(spec.ServiceAccountTokens, f.Child("serviceAccountTokens"))...)
	default:
		allErrs = append(allErrs, field.NotSupported(f.Child("purpose"), spec.Purpose, purposes))
	}
	return allErrs
}

func isTokenKeyAlgorithm(a rotation.KeyAlgorithm) bool {
	for _, t := range tokenKeyAlgorithms {
		if t == a {
			return true
		}
	}
	return false
}

// validateTokenKeys checks spec.serviceAccountTokens of a
// ServiceAccountTokens CA.
func validateTokenKeys(t *rotation.ServiceAccountTokenKeys, f *field.Path) field.ErrorList {
	if t == nil {
		return field.ErrorList{field.Required(f, "maxTokenExpiration (defaulted to 24h) is required with purpose ServiceAccountTokens")}
	}
	var allErrs field.ErrorList
	if d := t.MaxTokenExpiration; d == nil {
		allErrs = append(allErrs, field.Required(f.Child("maxTokenExpiration"), "the longest lifetime of a token the key signs (defaulted to 24h)"))
	} else if d.Duration < MinMaxTokenExpiration || d.Duration > MaxMaxTokenExpiration {
		allErrs = append(allErrs, field.Invalid(f.Child("maxTokenExpiration"), d.Duration.String(), "must be between 10m (kube-apiserver's minimum) and 8760h (a year)"))
	} else if d.Duration%time.Second != 0 {
		allErrs = append(allErrs, field.Invalid(f.Child("maxTokenExpiration"), d.Duration.String(), "must be whole seconds (kube-apiserver takes it in seconds)"))
	}
	if len(t.Issuer) > MaxIssuerLength {
		allErrs = append(allErrs, field.TooLong(f.Child("issuer"), "" /*unused*/, MaxIssuerLength))
	} else if strings.ContainsFunc(t.Issuer, unicode.IsSpace) {
		allErrs = append(allErrs, field.Invalid(f.Child("issuer"), t.Issuer, "must not contain whitespace: it is kube-apiserver's --service-account-issuer, a URL"))
	}
	lk := f.Child("legacyPublicKeys")
	if len(t.LegacyPublicKeys) > MaxLegacyPublicKeys {
		return append(allErrs, field.TooMany(lk, len(t.LegacyPublicKeys), MaxLegacyPublicKeys))
	}
	seen := map[string]int{}
	for i, k := range t.LegacyPublicKeys {
		p := lk.Index(i)
		if k.ExpireTime.IsZero() {
			allErrs = append(allErrs, field.Required(p.Child("expireTime"), "when the last token the key signed expires; the key is served until then"))
		}
		// The PEM is never quoted back: a private key pasted by mistake
		// must not end up in an error, a log or an audit event.
		pub, err := jwtkey.ParsePublicKeyPEM(k.PublicKey)
		if err != nil {
			allErrs = append(allErrs, field.Invalid(p.Child("publicKey"), field.OmitValueType{}, err.Error()))
			continue
		}
		kid, err := jwtkey.KeyID(pub)
		if err != nil {
			allErrs = append(allErrs, field.Invalid(p.Child("publicKey"), field.OmitValueType{}, err.Error()))
			continue
		}
		if j, ok := seen[kid]; ok {
			allErrs = append(allErrs, field.Invalid(p.Child("publicKey"), field.OmitValueType{},
				fmt.Sprintf("the same key (kid %s) as %s: give each key once", kid, lk.Index(j))))
			continue
		}
		seen[kid] = i
	}
	return allErrs
}

// validateImmutableTokenKeys keeps spec.serviceAccountTokens fixed but for
// legacyPublicKeys, which a migration adds to and prunes.
func validateImmutableTokenKeys(newT, oldT *rotation.ServiceAccountTokenKeys, f *field.Path) field.ErrorList {
	if newT == nil || oldT == nil {
		// Set or unset with the purpose (validatePurpose), which is
		// immutable itself.
		return nil
	}
	var allErrs field.ErrorList
	if !apiequality.Semantic.DeepEqual(newT.MaxTokenExpiration, oldT.MaxTokenExpiration) {
		value := "<unset>"
		if newT.MaxTokenExpiration != nil {
			value = newT.MaxTokenExpiration.Duration.String()
		}
		allErrs = append(allErrs, field.Invalid(f.Child("maxTokenExpiration"), value,
			"field is immutable: kube-apiserver caps tokens at it and a rotation's Complete waits for it after the new key began to sign; create another CertificateAuthority to change it"))
	}
	if newT.Issuer != oldT.Issuer {
		allErrs = append(allErrs, field.Invalid(f.Child("issuer"), newT.Issuer,
			"field is immutable: the tokens already signed carry it; create another CertificateAuthority to change it"))
	}
	// A field added later is fixed too until it is named above.
	n, o := *newT, *oldT
	n.MaxTokenExpiration, n.Issuer, n.LegacyPublicKeys = nil, "", nil
	o.MaxTokenExpiration, o.Issuer, o.LegacyPublicKeys = nil, "", nil
	if !apiequality.Semantic.DeepEqual(n, o) {
		allErrs = append(allErrs, field.Forbidden(f, "field is immutable but for legacyPublicKeys"))
	}
	return allErrs
}
