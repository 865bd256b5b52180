package validation

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	certvalidation "rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/strictpem"
)

// Bounds of a RotatingCredential.
const (
	MinRotationInterval = 30 * time.Second
	MaxRandomLength     = 4096
	MaxWebhookTimeout   = 30
	maxCABundleBytes    = 64 * 1024
	maxCABundleCerts    = 64
	// privilegedGroup is user.SystemPrivilegedGroup (k8s.io/apiserver),
	// named here so that API validation does not import the apiserver.
	privilegedGroup = "system:masters"
)

// ValidateRotatingCredential checks a new RotatingCredential.
func ValidateRotatingCredential(rc *rotation.RotatingCredential) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&rc.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(errs, validateCredentialSpec(&rc.Spec, field.NewPath("spec"))...)
}

// ValidateRotatingCredentialUpdate checks an update: the Secret and the
// minter type stay (the previous credential is revoked by the minter that
// made it).
func ValidateRotatingCredentialUpdate(rc, old *rotation.RotatingCredential) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&rc.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	errs = append(errs, validateCredentialSpec(&rc.Spec, field.NewPath("spec"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(rc.Spec.SecretRef.Name, old.Spec.SecretRef.Name, field.NewPath("spec", "secretRef", "name"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(string(rc.Spec.Minter.Type), string(old.Spec.Minter.Type), field.NewPath("spec", "minter", "type"))...)
	// A field added to the Secret reference later is fixed too until it is
	// named above.
	n, o := rc.Spec.SecretRef, old.Spec.SecretRef
	n.Name, o.Name = "", ""
	if !apiequality.Semantic.DeepEqual(n, o) {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "secretRef"), "field is immutable"))
	}
	return errs
}

// ValidateRotatingCredentialStatusUpdate checks status.
func ValidateRotatingCredentialStatusUpdate(rc, old *rotation.RotatingCredential) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&rc.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	f := field.NewPath("status")
	switch rc.Status.Phase {
	case rotation.CredentialPhaseNone, rotation.CredentialRotating, rotation.CredentialCompleted:
	default:
		errs = append(errs, field.NotSupported(f.Child("phase"), rc.Status.Phase, []string{string(rotation.CredentialRotating), string(rotation.CredentialCompleted)}))
	}
	if rc.Status.CredentialGeneration < old.Status.CredentialGeneration {
		errs = append(errs, field.Invalid(f.Child("credentialGeneration"), rc.Status.CredentialGeneration, "may not decrease"))
	}
	// /rotate stamps the current generation: a request never names an
	// older one than the request before it.
	if rc.Status.RotationRequestedGeneration < old.Status.RotationRequestedGeneration {
		errs = append(errs, field.Invalid(f.Child("rotationRequestedGeneration"), rc.Status.RotationRequestedGeneration, "may not decrease"))
	}
	if rc.Status.CompletionRequestedGeneration < old.Status.CompletionRequestedGeneration {
		errs = append(errs, field.Invalid(f.Child("completionRequestedGeneration"), rc.Status.CompletionRequestedGeneration, "may not decrease"))
	}
	if c := rc.Status.SecretClaim; c != "" && !isSHA256Hex(c) {
		errs = append(errs, field.Invalid(f.Child("secretClaim"), "<claim>", "must be a hex SHA-256 (64 lowercase hex digits)"))
	}
	if len(rc.Status.Conditions) > 8 {
		errs = append(errs, field.TooMany(f.Child("conditions"), len(rc.Status.Conditions), 8))
	} else {
		errs = append(errs, metav1validation.ValidateConditions(rc.Status.Conditions, f.Child("conditions"))...)
	}
	return errs
}

func validateCredentialSpec(s *rotation.RotatingCredentialSpec, f *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.SecretRef.Name == "" {
		errs = append(errs, field.Required(f.Child("secretRef", "name"), ""))
	} else {
		for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(s.SecretRef.Name, false) {
			errs = append(errs, field.Invalid(f.Child("secretRef", "name"), s.SecretRef.Name, msg))
		}
	}
	interval, grace := time.Duration(0), time.Duration(0)
	if s.RotationInterval == nil {
		errs = append(errs, field.Required(f.Child("rotationInterval"), ""))
	} else if interval = s.RotationInterval.Duration; interval < MinRotationInterval {
		errs = append(errs, field.Invalid(f.Child("rotationInterval"), s.RotationInterval.Duration.String(), "must be at least 30s"))
	}
	if s.GracePeriod == nil {
		errs = append(errs, field.Required(f.Child("gracePeriod"), ""))
	} else if grace = s.GracePeriod.Duration; grace < 0 {
		errs = append(errs, field.Invalid(f.Child("gracePeriod"), grace.String(), "must not be negative"))
	} else if interval > 0 && grace >= interval {
		errs = append(errs, field.Invalid(f.Child("gracePeriod"), grace.String(), "must be shorter than rotationInterval: a new credential is minted only after the previous one was revoked"))
	}
	return append(errs, validateMinter(&s.Minter, f.Child("minter"))...)
}

func validateMinter(m *rotation.Minter, f *field.Path) field.ErrorList {
	var errs field.ErrorList
	set := map[rotation.MinterType]bool{
		rotation.MinterRandom: m.Random != nil, rotation.MinterClientCertificate: m.ClientCertificate != nil,
		rotation.MinterServiceAccountToken: m.ServiceAccountToken != nil, rotation.MinterWebhook: m.Webhook != nil,
	}
	blocks := map[rotation.MinterType]string{rotation.MinterRandom: "random", rotation.MinterClientCertificate: "clientCertificate",
		rotation.MinterServiceAccountToken: "serviceAccountToken", rotation.MinterWebhook: "webhook"}
	if _, known := set[m.Type]; !known {
		return append(errs, field.NotSupported(f.Child("type"), m.Type, []string{"Random", "ClientCertificate", "ServiceAccountToken", "Webhook"}))
	}
	for t, present := range set {
		if t == m.Type && !present {
			errs = append(errs, field.Required(f.Child(blocks[t]), fmt.Sprintf("type %s needs its %s block", t, blocks[t])))
		}
		if t != m.Type && present {
			errs = append(errs, field.Forbidden(f.Child(blocks[t]), fmt.Sprintf("only the block of type %s may be set", m.Type)))
		}
	}
	switch {
	case m.Random != nil:
		r, rf := m.Random, f.Child("random")
		errs = append(errs, validateSecretKey(rf.Child("key"), r.Key)...)
		if r.Length < 1 || r.Length > MaxRandomLength {
			errs = append(errs, field.Invalid(rf.Child("length"), r.Length, fmt.Sprintf("must be 1 to %d", MaxRandomLength)))
		}
		if len(r.Alphabet) == 1 || len(r.Alphabet) > 256 {
			errs = append(errs, field.Invalid(rf.Child("alphabet"), r.Alphabet, "must be empty or hold 2 to 256 characters"))
		}
		seen := map[rune]bool{}
		for _, c := range r.Alphabet {
			if seen[c] || c > 126 || c < 33 {
				errs = append(errs, field.Invalid(rf.Child("alphabet"), r.Alphabet, "must be distinct printable ASCII characters"))
				break
			}
			seen[c] = true
		}
	case m.ClientCertificate != nil:
		c, cf := m.ClientCertificate, f.Child("clientCertificate")
		errs = append(errs, certvalidation.ValidateSignerName(cf.Child("signerName"), c.SignerName)...)
		if c.CommonName == "" || len(c.CommonName) > 64 {
			errs = append(errs, field.Invalid(cf.Child("commonName"), c.CommonName, "must hold 1 to 64 characters"))
		}
		for i, o := range c.Organizations {
			// kube-apiserver gives this group every permission; the
			// request rekey would make for it is refused at admission
			// (SubjectRestriction) anyway, so say it now.
			if o == privilegedGroup {
				errs = append(errs, field.Forbidden(cf.Child("organizations").Index(i), fmt.Sprintf("group %q is never certified: it bypasses all authorization", privilegedGroup)))
			}
		}
		if c.Duration != nil && c.Duration.Duration < 10*time.Minute {
			errs = append(errs, field.Invalid(cf.Child("duration"), c.Duration.Duration.String(), "must be at least 10m"))
		}
	case m.ServiceAccountToken != nil:
		t, tf := m.ServiceAccountToken, f.Child("serviceAccountToken")
		for _, msg := range apimachineryvalidation.ValidateServiceAccountName(t.ServiceAccountName, false) {
			errs = append(errs, field.Invalid(tf.Child("serviceAccountName"), t.ServiceAccountName, msg))
		}
		if t.ExpirationSeconds != nil && *t.ExpirationSeconds < 600 {
			errs = append(errs, field.Invalid(tf.Child("expirationSeconds"), *t.ExpirationSeconds, "must be at least 600 (kube-apiserver's minimum)"))
		}
	case m.Webhook != nil:
		w, wf := m.Webhook, f.Child("webhook")
		if u, err := url.Parse(w.URL); err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "" {
			errs = append(errs, field.Invalid(wf.Child("url"), w.URL, "must be an https URL with a host, no user info and no fragment"))
		}
		if len(w.CABundle) > maxCABundleBytes {
			errs = append(errs, field.TooLong(wf.Child("caBundle"), "", maxCABundleBytes))
		} else if len(w.CABundle) > 0 {
			if _, err := strictpem.Certificates(w.CABundle, maxCABundleCerts); err != nil {
				errs = append(errs, field.Invalid(wf.Child("caBundle"), "<PEM>", err.Error()))
			}
		}
		if w.TimeoutSeconds != nil && (*w.TimeoutSeconds < 1 || *w.TimeoutSeconds > MaxWebhookTimeout) {
			errs = append(errs, field.Invalid(wf.Child("timeoutSeconds"), *w.TimeoutSeconds, fmt.Sprintf("must be 1 to %d", MaxWebhookTimeout)))
		}
	}
	return errs
}

// validateSecretKey: a Secret data key, leaving room for the ".old" suffix
// and not ending in it (rekey keeps the previous credential under
// "<key>.old"; a webhook's keys are held to the same rule).
func validateSecretKey(f *field.Path, key string) field.ErrorList {
	var errs field.ErrorList
	if strings.HasSuffix(key, ".old") {
		errs = append(errs, field.Invalid(f, key, `must not end in ".old", which rekey keeps for the previous credential`))
	}
	for _, msg := range utilvalidation.IsConfigMapKey(key + ".old") {
		errs = append(errs, field.Invalid(f, key, msg))
	}
	return errs
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
