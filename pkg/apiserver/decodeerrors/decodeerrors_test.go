package decodeerrors

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"rekey.io/rekey/pkg/apis/certificates"
	certinstall "rekey.io/rekey/pkg/apis/certificates/install"
	"rekey.io/rekey/pkg/apis/rotation"
	rotationinstall "rekey.io/rekey/pkg/apis/rotation/install"
)

// decode decodes body as the API handlers do: the negotiated serializer of
// its media type, converted to the internal version.
func decode(t *testing.T, mediaType string, strict bool, body string, internal schema.GroupVersion) error {
	t.Helper()
	scheme := runtime.NewScheme()
	certinstall.Install(scheme)
	rotationinstall.Install(scheme)
	codecs := serializer.NewCodecFactory(scheme)
	ns := Wrap(codecs, scheme)
	info, ok := runtime.SerializerInfoForMediaType(ns.SupportedMediaTypes(), mediaType)
	if !ok {
		t.Fatalf("no serializer for %s", mediaType)
	}
	s := info.Serializer
	if strict {
		s = info.StrictSerializer
	}
	_, _, err := ns.DecoderToVersion(s, internal).Decode([]byte(body), nil, nil)
	return err
}

func TestDecodeErrorsNameTheField(t *testing.T) {
	certs := schema.GroupVersion{Group: certificates.GroupName, Version: runtime.APIVersionInternal}
	rot := schema.GroupVersion{Group: rotation.GroupName, Version: runtime.APIVersionInternal}
	for name, tc := range map[string]struct {
		mediaType, body string
		internal        schema.GroupVersion
		want            string
	}{
		"request not base64": {runtime.ContentTypeJSON,
			`{"apiVersion":"certificates.rekey.io/v1alpha1","kind":"CertificateSigningRequest","metadata":{"name":"a"},"spec":{"signerName":"example.com/x","request":"not base64!!"}}`,
			certs, "spec.request: must be base64 (illegal base64 data at input byte 3): encode the data, e.g. with base64 -w0"},
		"maxDuration typo": {runtime.ContentTypeJSON,
			`{"apiVersion":"certificates.rekey.io/v1alpha1","kind":"Signer","metadata":{"name":"example.com:x"},"spec":{"signerName":"example.com/x","policy":{"maxDuration":"720hh"}}}`,
			certs, `spec.policy.maxDuration: "720hh" is not a duration: write hours, minutes and seconds, such as 720h0m0s or 10m (units h, m, s; no d or y)`},
		"validity in years, YAML": {runtime.ContentTypeYAML,
			"apiVersion: rotation.rekey.io/v1alpha1\nkind: CertificateAuthority\nmetadata: {name: a}\nspec:\n  validity: 1y\n",
			rot, `spec.validity: "1y" is not a duration`},
		"rotationInterval in days": {runtime.ContentTypeJSON,
			`{"apiVersion":"rotation.rekey.io/v1alpha1","kind":"RotatingCredential","metadata":{"name":"a","namespace":"b"},"spec":{"rotationInterval":"30d"}}`,
			rot, `spec.rotationInterval: "30d" is not a duration`},
		"duration in a minter": {runtime.ContentTypeJSON,
			`{"apiVersion":"rotation.rekey.io/v1alpha1","kind":"RotatingCredential","metadata":{"name":"a","namespace":"b"},"spec":{"minter":{"type":"ClientCertificate","clientCertificate":{"duration":"1 day"}}}}`,
			rot, `spec.minter.clientCertificate.duration: "1 day" is not a duration`},
		"webhook CA bundle not base64": {runtime.ContentTypeJSON,
			`{"apiVersion":"rotation.rekey.io/v1alpha1","kind":"RotatingCredential","metadata":{"name":"a","namespace":"b"},"spec":{"minter":{"type":"Webhook","webhook":{"caBundle":"-----BEGIN"}}}}`,
			rot, "spec.minter.webhook.caBundle: must be base64"},
	} {
		t.Run(name, func(t *testing.T) {
			for _, strict := range []bool{false, true} {
				err := decode(t, tc.mediaType, strict, tc.body, tc.internal)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("strict=%v: got %v, want it to contain %q", strict, err, tc.want)
				}
			}
		})
	}
}

func TestDecodeStillWorks(t *testing.T) {
	certs := schema.GroupVersion{Group: certificates.GroupName, Version: runtime.APIVersionInternal}
	good := `{"apiVersion":"certificates.rekey.io/v1alpha1","kind":"Signer","metadata":{"name":"example.com:x"},"spec":{"signerName":"example.com/x","policy":{"maxDuration":"720h"}}}`
	if err := decode(t, runtime.ContentTypeJSON, true, good, certs); err != nil {
		t.Fatal(err)
	}
	// Unknown fields stay a strict decoding error, which the handler turns
	// into a warning or a refusal as the request's fieldValidation says.
	unknown := `{"apiVersion":"certificates.rekey.io/v1alpha1","kind":"Signer","metadata":{"name":"example.com:x"},"spec":{"signerName":"example.com/x","bogus":1}}`
	err := decode(t, runtime.ContentTypeJSON, true, unknown, certs)
	if _, ok := runtime.AsStrictDecodingError(err); !ok {
		t.Fatalf("want a strict decoding error, got %T %v", err, err)
	}
}

// A value of the wrong JSON type is named by its field path and JSON types,
// not by the decoder's Go struct and type names.
func TestTypeErrorsSayJSONTypes(t *testing.T) {
	certs := schema.GroupVersion{Group: certificates.GroupName, Version: runtime.APIVersionInternal}
	rot := schema.GroupVersion{Group: rotation.GroupName, Version: runtime.APIVersionInternal}
	for name, tc := range map[string]struct {
		mediaType, body string
		internal        schema.GroupVersion
		want            string
	}{
		"string for an integer": {runtime.ContentTypeJSON,
			`{"apiVersion":"certificates.rekey.io/v1alpha1","kind":"CertificateSigningRequest","metadata":{"name":"a"},"spec":{"signerName":"example.com/x","expirationSeconds":"3600"}}`,
			certs, "spec.expirationSeconds: must be an integer, not a string"},
		"fraction for an integer": {runtime.ContentTypeJSON,
			`{"apiVersion":"certificates.rekey.io/v1alpha1","kind":"CertificateSigningRequest","metadata":{"name":"a"},"spec":{"signerName":"example.com/x","expirationSeconds":1.5}}`,
			certs, "spec.expirationSeconds: must be an integer, not a number with a fraction"},
		"array for an object, YAML": {runtime.ContentTypeYAML,
			"apiVersion: rotation.rekey.io/v1alpha1\nkind: CertificateAuthority\nmetadata: {name: a}\nspec:\n  publish:\n    configMaps: [a, b]\n",
			rot, "spec.publish.configMaps: must be an object, not an array"},
		"object for a string": {runtime.ContentTypeJSON,
			`{"apiVersion":"certificates.rekey.io/v1alpha1","kind":"CertificateSigningRequest","metadata":{"name":"a"},"spec":{"signerName":{"a":1}}}`,
			certs, "spec.signerName: must be a string, not an object"},
		"string for an array": {runtime.ContentTypeJSON,
			`{"apiVersion":"certificates.rekey.io/v1alpha1","kind":"CertificateSigningRequest","metadata":{"name":"a"},"spec":{"signerName":"example.com/x","usages":"client auth"}}`,
			certs, "spec.usages: must be an array, not a string"},
	} {
		t.Run(name, func(t *testing.T) {
			for _, strict := range []bool{false, true} {
				err := decode(t, tc.mediaType, strict, tc.body, tc.internal)
				if err == nil || err.Error() != tc.want {
					t.Errorf("strict=%v: got %v, want %q", strict, err, tc.want)
				}
			}
		})
	}
}
