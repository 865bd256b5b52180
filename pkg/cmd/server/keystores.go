package server

import (
	"encoding/base64"
	"errors"
	"os"

	"github.com/spf13/pflag"

	"rekey.io/rekey/pkg/apiserver"
	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/keystorepaths"
)

// KEKFileName is the standalone key-encryption key under <data-dir>/pki.
const KEKFileName = "ca-kek.key"

// KeyStoreOptions say where CA keys may live.
type KeyStoreOptions struct {
	// KEKFile holds the key-encryption key of CA keys stored in etcd.
	KEKFile string
	// Allowed are the PKCS#11 modules and the directories of CA and PIN
	// files that CertificateAuthorities may name.
	Allowed keystorepaths.Allowed
}

// NewKeyStoreOptions returns the defaults: no key-encryption key (required
// unless standalone mode makes one), nothing allowed on the host.
func NewKeyStoreOptions() *KeyStoreOptions { return &KeyStoreOptions{} }

// AddFlags adds the key stores' flags.
func (o *KeyStoreOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.KEKFile, "ca-key-encryption-key-file", o.KEKFile,
		"File with the 32-byte key-encryption key (raw, base64 or hex) that encrypts CA keys stored in etcd. "+
			"Required unless --standalone, which generates <data-dir>/pki/ca-kek.key on first start. Starting with a different key than before fails.")
	fs.StringSliceVar(&o.Allowed.PKCS11Modules, "pkcs11-module", o.Allowed.PKCS11Modules,
		"Absolute path of a PKCS#11 module that CertificateAuthorities may use (repeat for several). A module runs inside rekey-apiserver; "+
			"none is allowed unless listed here.")
	fs.StringSliceVar(&o.Allowed.Dirs, "file-keystore-dir", o.Allowed.Dirs,
		"Directory whose files CertificateAuthorities may name as File key-store certificate and key, or as PKCS#11 PIN file (repeat for several). "+
			"No file is readable unless its directory is listed here.")
}

// Validate reports every invalid key-store option.
func (o *KeyStoreOptions) Validate() []error {
	errs := o.Allowed.Validate()
	if o.KEKFile == "" {
		errs = append(errs, errors.New("--ca-key-encryption-key-file is required unless --standalone is set: the built-in CAs keep their keys in etcd encrypted with it"))
	}
	return errs
}

// ApplyTo puts the key-store configuration into the server's.
func (o *KeyStoreOptions) ApplyTo(c *apiserver.ExtraConfig) {
	c.KeyStores.KEKFile = o.KEKFile
	c.KeyStores.Allowed = o.Allowed
}

// ensureKEK makes a random key-encryption key file if there is none.
func ensureKEK(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	kek, err := signing.NewKEK()
	if err != nil {
		return err
	}
	defer clear(kek)
	return pki.WriteFileAtomic(path, []byte(base64.StdEncoding.EncodeToString(kek)+"\n"), 0o600)
}
