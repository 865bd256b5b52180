package server

import (
	"bytes"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"rekey.io/rekey/pkg/apis/certificates"
)

// The storage codec writes the chosen media type and reads any of them.
func TestStorageCodec(t *testing.T) {
	if _, err := storageCodec("application/xml"); err == nil || !strings.Contains(err.Error(), "--storage-media-type") {
		t.Fatalf("unsupported media type: err = %v, want one naming the flag", err)
	}
	proto, err := storageCodec(runtime.ContentTypeProtobuf)
	if err != nil {
		t.Fatal(err)
	}
	js, err := storageCodec(runtime.ContentTypeJSON)
	if err != nil {
		t.Fatal(err)
	}
	csr := &certificates.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: certificates.CertificateSigningRequestSpec{SignerName: "example.com/s", Request: []byte("r")}}
	for name, codec := range map[string]runtime.Codec{"protobuf": proto, "json": js} {
		data, err := runtime.Encode(codec, csr)
		if err != nil {
			t.Fatal(err)
		}
		if name == "protobuf" != bytes.HasPrefix(data, []byte("k8s\x00")) {
			t.Fatalf("%s codec wrote %q...", name, data[:min(len(data), 8)])
		}
		// Either codec reads what the other wrote.
		for _, reader := range []runtime.Codec{proto, js} {
			back, err := runtime.Decode(reader, data)
			if err != nil {
				t.Fatalf("reading %s: %v", name, err)
			}
			got, ok := back.(*certificates.CertificateSigningRequest)
			if !ok || got.Name != "x" || got.Spec.SignerName != "example.com/s" {
				t.Fatalf("reading %s: got %#v", name, back)
			}
		}
	}
}
