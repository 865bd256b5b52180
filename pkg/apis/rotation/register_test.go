package rotation

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

func TestRegister(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if !scheme.Recognizes(SchemeGroupVersion.WithKind("CertificateAuthority")) {
		t.Fatal("CertificateAuthority is not registered")
	}
	if Resource("certificateauthorities").String() != "certificateauthorities.rotation.rekey.io" {
		t.Fatal(Resource("certificateauthorities"))
	}
}
