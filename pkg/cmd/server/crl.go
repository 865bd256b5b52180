package server

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"rekey.io/rekey/pkg/apiserver"
	"rekey.io/rekey/pkg/crl"
)

// CRLOptions configure the CRLs every replica serves at /crl/<caName>
// (package crl).
type CRLOptions struct {
	// Validity is nextUpdate minus the issue time of each CRL; a CRL is
	// re-issued at half of it (and whenever a certificate is revoked).
	Validity time.Duration
}

// NewCRLOptions returns the defaults.
func NewCRLOptions() *CRLOptions {
	return &CRLOptions{Validity: crl.DefaultValidity}
}

// AddFlags adds --crl-validity.
func (o *CRLOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Validity, "crl-validity", o.Validity,
		"How long each CertificateAuthority's CRL is valid (nextUpdate is the issue time plus this). A CRL is re-issued at half of it, and at once when a certificate is revoked. At least 2m.")
}

// Validate refuses a validity below crl.MinValidity.
func (o *CRLOptions) Validate() []error {
	if o.Validity < crl.MinValidity {
		return []error{fmt.Errorf("--crl-validity %s: must be at least %s", o.Validity, crl.MinValidity)}
	}
	return nil
}

// ApplyTo sets the server's CRL validity.
func (o *CRLOptions) ApplyTo(c *apiserver.ExtraConfig) {
	c.CRLValidity = o.Validity
}
