package apiserver

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
)

// seedObjects are one well-formed object of each kind, the fuzzer's
// starting points in both wire encodings.
func seedObjects() []runtime.Object {
	return []runtime.Object{
		&certv1alpha1.CertificateSigningRequest{
			TypeMeta:   metav1.TypeMeta{APIVersion: "certificates.rekey.io/v1alpha1", Kind: "CertificateSigningRequest"},
			ObjectMeta: metav1.ObjectMeta{Name: "alice", Labels: map[string]string{"a": "b"}},
			Spec: certv1alpha1.CertificateSigningRequestSpec{
				Request: []byte("-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"), SignerName: "example.com/signer",
				ExpirationSeconds: ptr.To[int32](3600), Usages: []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth},
				Username: "alice", Groups: []string{"g"}, Extra: map[string]certv1alpha1.ExtraValue{"k": {"v"}},
			},
			Status: certv1alpha1.CertificateSigningRequestStatus{
				Conditions:  []certv1alpha1.CertificateSigningRequestCondition{{Type: certv1alpha1.CertificateApproved, Status: metav1.ConditionTrue, Reason: "R"}},
				Certificate: []byte("cert"),
			},
		},
		&certv1alpha1.Signer{
			TypeMeta:   metav1.TypeMeta{APIVersion: "certificates.rekey.io/v1alpha1", Kind: "Signer"},
			ObjectMeta: metav1.ObjectMeta{Name: "example.com:signer"},
			Spec:       certv1alpha1.SignerSpec{SignerName: "example.com/signer"},
		},
		&rotationv1alpha1.CertificateAuthority{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rotation.rekey.io/v1alpha1", Kind: "CertificateAuthority"},
			ObjectMeta: metav1.ObjectMeta{Name: "ca"},
		},
	}
}

// FuzzDecode feeds arbitrary request bodies to the decoder every write
// goes through (protobuf, JSON and YAML recognised by content): it must
// return an error or an object, never panic or hang.
func FuzzDecode(f *testing.F) {
	for _, obj := range seedObjects() {
		for _, mediaType := range []string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON} {
			info, ok := runtime.SerializerInfoForMediaType(Codecs.SupportedMediaTypes(), mediaType)
			if !ok {
				f.Fatalf("no serializer for %s", mediaType)
			}
			data, err := runtime.Encode(info.Serializer, obj)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	decoder := Codecs.UniversalDecoder()
	f.Fuzz(func(t *testing.T, data []byte) {
		obj, _, err := decoder.Decode(data, nil, nil)
		if err == nil && obj == nil {
			t.Fatal("no error and no object")
		}
	})
}
