package validation

import (
	"crypto/x509"
	"fmt"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// attributeNames names the subject attributes a message is likely to be
// about; any other is named by its OID.
var attributeNames = map[string]string{
	"2.5.4.3": "commonName", "2.5.4.10": "organization", "2.5.4.11": "organizationalUnit",
	"2.5.4.6": "country", "2.5.4.7": "locality", "2.5.4.8": "province", "2.5.4.9": "streetAddress",
	"2.5.4.17": "postalCode", "2.5.4.5": "serialNumber", "1.2.840.113549.1.9.1": "emailAddress",
}

// validateRequestText refuses a request whose subject attributes or
// subject alternative names hold a control character or a bidirectional
// formatting character. kube-apiserver reads the common name as a user
// name and the organizations as groups, and approvers read them in
// kubectl, logs and events: "system:admin\x1b[2K\rCN=alice" must not
// reach a terminal as CN=alice. No legitimate name needs one. The error
// names the attribute or SAN and the character, never repeats the value.
func validateRequestText(fldPath *field.Path, csr *x509.CertificateRequest) field.ErrorList {
	var allErrs field.ErrorList
	refuse := func(what string, s string) {
		if bad, ok := unsafeRune(s); ok {
			allErrs = append(allErrs, field.Invalid(fldPath, "<request bytes>", fmt.Sprintf("%s holds %s: a control or bidirectional formatting character is not allowed", what, bad)))
		}
	}
	for _, atv := range csr.Subject.Names {
		s, ok := atv.Value.(string)
		if !ok {
			continue
		}
		name := attributeNames[atv.Type.String()]
		if name == "" {
			name = atv.Type.String()
		}
		refuse("subject attribute "+name, s)
	}
	for i, n := range csr.DNSNames {
		refuse(fmt.Sprintf("DNS subject alternative name %d", i), n)
	}
	for i, e := range csr.EmailAddresses {
		refuse(fmt.Sprintf("email subject alternative name %d", i), e)
	}
	for i, u := range csr.URIs {
		refuse(fmt.Sprintf("URI subject alternative name %d", i), u.String())
	}
	return allErrs
}

// unsafeRune describes the first character of s that is a control
// character (C0, DEL, C1), a bidirectional formatting character, or
// invalid UTF-8.
func unsafeRune(s string) (string, bool) {
	if !utf8.ValidString(s) {
		return "invalid UTF-8", true
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			return fmt.Sprintf("%U", r), true
		}
	}
	return "", false
}
