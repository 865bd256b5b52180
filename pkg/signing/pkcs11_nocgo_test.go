//go:build !cgo

package signing

import (
	"errors"
	"testing"
)

// A static build names what is missing instead of failing to link or
// pretending a token is there.
func TestNoPKCS11WithoutCgo(t *testing.T) {
	if _, err := OpenPKCS11(PKCS11Config{ModulePath: "/usr/lib/softhsm/libsofthsm2.so"}); !errors.Is(err, ErrNoPKCS11) {
		t.Fatalf("error = %v, want ErrNoPKCS11", err)
	}
}
