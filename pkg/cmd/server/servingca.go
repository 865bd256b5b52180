package server

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	genericapiserver "k8s.io/apiserver/pkg/server"
	netutils "k8s.io/utils/net"

	"rekey.io/rekey/pkg/apiserver"
	"rekey.io/rekey/pkg/servingcert"
)

// ServingCAOptions make rekey serve with a certificate from a
// CertificateAuthority it manages (off unless --serving-ca is set).
type ServingCAOptions struct {
	CAName      string
	Hosts       []string
	APIServices []string
}

// NewServingCAOptions returns the defaults.
func NewServingCAOptions() *ServingCAOptions {
	return &ServingCAOptions{
		Hosts:       []string{"rekey-apiserver.rekey-system.svc", "localhost", "127.0.0.1"},
		APIServices: []string{"v1alpha1.certificates.rekey.io", "v1alpha1.rotation.rekey.io", "v1alpha1.attestation.rekey.io"},
	}
}

// AddFlags adds the serving CA flags.
func (o *ServingCAOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.CAName, "serving-ca", o.CAName,
		"Name of a CertificateAuthority (created if missing, Etcd key store) that issues rekey-apiserver's serving certificate. "+
			"rekey then keeps the caBundle of --serving-ca-apiservices equal to its trust bundle and renews the certificate after a rotation starts, "+
			"without a restart. --tls-cert-file is served only until the first certificate is issued.")
	fs.StringSliceVar(&o.Hosts, "serving-ca-hosts", o.Hosts, "DNS names and IP addresses of the serving certificate; the aggregator checks <service>.<namespace>.svc.")
	fs.StringSliceVar(&o.APIServices, "serving-ca-apiservices", o.APIServices, "APIServices whose caBundle rekey keeps (needs --kubeconfig).")
}

// Validate reports invalid serving CA options.
func (o *ServingCAOptions) Validate() []error {
	if o.CAName == "" {
		return nil
	}
	var errs []error
	for _, msg := range utilvalidation.IsDNS1123Subdomain(o.CAName) {
		errs = append(errs, fmt.Errorf("--serving-ca %q: %s", o.CAName, msg))
	}
	if len(o.Hosts) == 0 {
		errs = append(errs, errors.New("--serving-ca-hosts must name at least one host"))
	}
	for _, h := range o.Hosts {
		if netutils.ParseIPSloppy(h) == nil && len(utilvalidation.IsDNS1123Subdomain(h)) > 0 && h != "localhost" {
			errs = append(errs, fmt.Errorf("--serving-ca-hosts %q is neither an IP address nor a DNS name", h))
		}
	}
	return errs
}

// ApplyTo makes the TLS listener serve from a provider the serving CA
// manager swaps, starting with the configured certificate.
func (o *ServingCAOptions) ApplyTo(c *genericapiserver.RecommendedConfig, extra *apiserver.ExtraConfig) error {
	if o.CAName == "" {
		return nil
	}
	if c.SecureServing == nil || c.SecureServing.Cert == nil {
		return errors.New("--serving-ca needs secure serving")
	}
	certPEM, keyPEM := c.SecureServing.Cert.CurrentCertKeyContent()
	provider := servingcert.NewProvider(certPEM, keyPEM)
	c.SecureServing.Cert = provider
	extra.ServingCA = &servingcert.Config{CAName: o.CAName, Hosts: o.Hosts, APIServices: o.APIServices, Provider: provider}
	return nil
}
