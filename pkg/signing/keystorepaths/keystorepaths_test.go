package keystorepaths

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckModule(t *testing.T) {
	if err := (Allowed{}).CheckModule("/usr/lib/softhsm/libsofthsm2.so"); err == nil || !strings.Contains(err.Error(), "--pkcs11-module") {
		t.Fatalf("no allow-list: error = %v", err)
	}
	a := Allowed{PKCS11Modules: []string{"/usr/lib/softhsm/libsofthsm2.so"}}
	if err := a.CheckModule("/usr/lib/softhsm/libsofthsm2.so"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/tmp/evil.so", "/usr/lib/softhsm/../softhsm/libsofthsm2.so", "/usr/lib/softhsm/libsofthsm2.so "} {
		if err := a.CheckModule(p); err == nil {
			t.Errorf("%q allowed", p)
		}
	}
}

func TestCheckFile(t *testing.T) {
	a := Allowed{Dirs: []string{"/etc/rekey/ca"}}
	if err := a.CheckFile("/etc/rekey/ca/team/ca.crt"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/etc/rekey/ca/../../shadow", "/etc/rekey/cafile", "/etc/rekey/ca", "relative/ca.crt", "/etc/rekey/ca//x", "/var/lib/rekey/ca-kek.key"} {
		if err := a.CheckFile(p); err == nil {
			t.Errorf("%q allowed", p)
		}
	}
	if err := (Allowed{}).CheckFile("/etc/rekey/ca/x"); err == nil || !strings.Contains(err.Error(), "--file-keystore-dir") {
		t.Fatalf("no allow-list: error = %v", err)
	}
}

func TestCheckFileResolvedRefusesLinksOut(t *testing.T) {
	allowed, outside := t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(allowed, "ca.key")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(allowed, "ca.crt")
	if err := os.WriteFile(inside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := Allowed{Dirs: []string{allowed}}
	if err := a.CheckFileResolved(link); err == nil {
		t.Fatal("a link out of the allowed directory was followed")
	}
	if err := a.CheckFileResolved(inside); err != nil {
		t.Fatal(err)
	}
}
