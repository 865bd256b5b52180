// Package standalone lets rekey-apiserver run with no cluster around it:
// a PKI generated on first start and reused after, an embedded etcd, an
// admin kubeconfig, and a small built-in authorizer.
package standalone

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"rekey.io/rekey/pkg/pki"
)

// File names under <data-dir>/pki.
const (
	ServingCAFile   = "serving-ca.crt"
	servingCAKey    = "serving-ca.key"
	ServingCertFile = "serving.crt"
	ServingKeyFile  = "serving.key"
	ClientCAFile    = "client-ca.crt"
	ClientCAKeyFile = "client-ca.key"
	adminCertFile   = "admin.crt"
	adminKeyFile    = "admin.key"

	// AdminUser is the user name in the admin kubeconfig's certificate.
	AdminUser = "rekey-admin"
	// AdminGroup gives the admin every permission in standalone mode.
	AdminGroup = "system:masters"

	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
)

// PKI is the set of certificates a standalone server uses.
type PKI struct {
	Dir string
}

// Path returns the path of a file in the PKI directory.
func (p PKI) Path(name string) string { return filepath.Join(p.Dir, name) }

// Ensure creates whatever is missing: the serving CA and serving
// certificate (valid for the given host names and IPs), the client CA, and
// the admin client certificate. Existing files are reused untouched, so a
// restart keeps every kubeconfig working.
func (p PKI) Ensure(hosts []string, ips []net.IP) error {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return fmt.Errorf("creating PKI directory: %w", err)
	}
	servingCA, err := p.ensureCA(ServingCAFile, servingCAKey, "rekey-serving-ca", pki.NewCA)
	if err != nil {
		return err
	}
	if err := p.ensureLeaf(ServingCertFile, ServingKeyFile, servingCA, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "rekey-apiserver"},
		DNSNames:    hosts,
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return err
	}
	clientCA, err := p.ensureCA(ClientCAFile, ClientCAKeyFile, "rekey-client-ca", pki.NewClientCA)
	if err != nil {
		return err
	}
	return p.ensureLeaf(adminCertFile, adminKeyFile, clientCA, &x509.Certificate{
		Subject:     pkix.Name{CommonName: AdminUser, Organization: []string{AdminGroup}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (p PKI) ensureCA(certName, keyName, commonName string, newCA func(string, time.Duration) (*pki.KeyPair, error)) (*pki.KeyPair, error) {
	if kp, err := pki.Load(p.Path(certName), p.Path(keyName)); err == nil {
		return kp, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	ca, err := newCA(commonName, caValidity)
	if err != nil {
		return nil, err
	}
	return ca, ca.Write(p.Path(certName), p.Path(keyName))
}

func (p PKI) ensureLeaf(certName, keyName string, ca *pki.KeyPair, template *x509.Certificate) error {
	if _, err := pki.Load(p.Path(certName), p.Path(keyName)); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	leaf, err := ca.Issue(template, leafValidity)
	if err != nil {
		return err
	}
	return leaf.Write(p.Path(certName), p.Path(keyName))
}

// IssueClientCertificate signs a client certificate for any user and groups
// with the standalone client CA. Tests and `make run` users use it to act as
// someone other than the admin.
func (p PKI) IssueClientCertificate(user string, groups []string) (certPEM, keyPEM []byte, err error) {
	ca, err := pki.Load(p.Path(ClientCAFile), p.Path(ClientCAKeyFile))
	if err != nil {
		return nil, nil, err
	}
	leaf, err := ca.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, leafValidity)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = leaf.KeyPEM()
	return leaf.CertPEM(), keyPEM, err
}
