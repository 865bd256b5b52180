// Package keystorepaths holds the allow-lists of host paths that a
// CertificateAuthority may name: PKCS#11 modules (a module is a shared
// library that runs inside rekey-apiserver when it is loaded) and the
// directories that File key stores and PKCS#11 PIN files are read from.
// Both come from the server's flags, never from an API object, so that
// whoever may create a CertificateAuthority cannot make the server load
// code or read files the operator did not offer.
package keystorepaths

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Allowed is what the operator offered with --pkcs11-module and
// --file-keystore-dir. The zero value allows nothing.
type Allowed struct {
	// PKCS11Modules are absolute paths of loadable modules.
	PKCS11Modules []string
	// Dirs are absolute directories whose files (at any depth) File key
	// stores and PKCS#11 PIN files may name.
	Dirs []string
}

// Validate checks the flags themselves.
func (a Allowed) Validate() []error {
	var errs []error
	for _, m := range a.PKCS11Modules {
		if !filepath.IsAbs(m) || filepath.Clean(m) != m {
			errs = append(errs, fmt.Errorf("--pkcs11-module %q must be an absolute, clean path", m))
		}
	}
	for _, d := range a.Dirs {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d || d == "/" {
			errs = append(errs, fmt.Errorf("--file-keystore-dir %q must be an absolute, clean path other than /", d))
		}
	}
	return errs
}

// CheckModule refuses a PKCS#11 module that is not on the list.
func (a Allowed) CheckModule(path string) error {
	if slices.Contains(a.PKCS11Modules, path) {
		return nil
	}
	if len(a.PKCS11Modules) == 0 {
		return errors.New("no PKCS#11 module may be loaded: start rekey-apiserver with --pkcs11-module=<path> for each module to allow")
	}
	return fmt.Errorf("PKCS#11 module %q is not allowed; allowed (--pkcs11-module): %s", path, strings.Join(a.PKCS11Modules, ", "))
}

// CheckFile refuses a path outside the allowed directories. The path must
// be clean (no "..", no "." segments, no doubled slashes), so the check is
// made on the path that will be opened.
func (a Allowed) CheckFile(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("%q must be an absolute, clean path", path)
	}
	if a.inDirs(path) {
		return nil
	}
	if len(a.Dirs) == 0 {
		return errors.New("no key-store file may be read: start rekey-apiserver with --file-keystore-dir=<dir> for each directory to allow")
	}
	return fmt.Errorf("%q is not inside an allowed directory; allowed (--file-keystore-dir): %s", path, strings.Join(a.Dirs, ", "))
}

// CheckFileResolved is CheckFile after symbolic links are resolved, for
// the moment a file is opened: a link inside an allowed directory must not
// lead out of it.
func (a Allowed) CheckFileResolved(path string) error {
	if err := a.CheckFile(path); err != nil {
		return err
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", path, err)
	}
	var dirs []string
	for _, d := range a.Dirs {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			dirs = append(dirs, r)
		}
	}
	if !(Allowed{Dirs: dirs}).inDirs(resolved) {
		return fmt.Errorf("%s resolves to %s, outside the allowed directories", path, resolved)
	}
	return nil
}

func (a Allowed) inDirs(path string) bool {
	for _, d := range a.Dirs {
		if strings.HasPrefix(path, d+string(filepath.Separator)) {
			return true
		}
	}
	return false
}
