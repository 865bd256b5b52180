package server

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"

	"rekey.io/rekey/pkg/apiserver"
	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/keystorepaths"
)

// KEKFileName is the standalone key-encryption key under <data-dir>/pki.
const KEKFileName = "ca-kek.key"

// KeyStoreOptions say where CA keys may live.
type KeyStoreOptions struct {
	// KEKFile holds the key-encryption key of CA keys stored in etcd;
	// KEKSecret (namespace/name) is a Secret of the host cluster that does.
	KEKFile, KEKSecret string
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
	fs.StringVar(&o.KEKSecret, "ca-key-encryption-key-secret", o.KEKSecret,
		"NAMESPACE/NAME of a Secret of the host cluster whose key \"kek\" holds the key-encryption key (as in the file). "+
			"rekey creates it with a random key on first start when it does not exist, and never changes it. Exclusive with --ca-key-encryption-key-file.")
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
	switch {
	case o.KEKFile == "" && o.KEKSecret == "":
		errs = append(errs, errors.New("--ca-key-encryption-key-file or --ca-key-encryption-key-secret is required unless --standalone is set: the built-in CAs keep their keys in etcd encrypted with it"))
	case o.KEKFile != "" && o.KEKSecret != "":
		errs = append(errs, errors.New("--ca-key-encryption-key-file and --ca-key-encryption-key-secret are exclusive"))
	case o.KEKSecret != "":
		if _, err := o.kekSecretRef(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// ApplyTo puts the key-store configuration into the server's.
func (o *KeyStoreOptions) ApplyTo(c *apiserver.ExtraConfig) {
	c.KeyStores.KEKFile = o.KEKFile
	c.KeyStores.KEKSecret, _ = o.kekSecretRef()
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

// kekSecretRef parses --ca-key-encryption-key-secret; the zero value when
// it is not set.
func (o *KeyStoreOptions) kekSecretRef() (types.NamespacedName, error) {
	if o.KEKSecret == "" {
		return types.NamespacedName{}, nil
	}
	ns, name, ok := strings.Cut(o.KEKSecret, "/")
	if !ok || len(utilvalidation.IsDNS1123Label(ns)) > 0 || len(utilvalidation.IsDNS1123Subdomain(name)) > 0 {
		return types.NamespacedName{}, fmt.Errorf("--ca-key-encryption-key-secret %q must be NAMESPACE/NAME of a Secret", o.KEKSecret)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}
