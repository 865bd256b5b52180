package server

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/pkg/signing"
)

// KEKFileName is the standalone key-encryption key under <data-dir>/pki.
const KEKFileName = "ca-kek.key"

// newEtcdClient connects to the same etcd as the API storage, for the data
// under the private prefix.
func (o *Options) newEtcdClient() (*clientv3.Client, error) {
	t := o.RecommendedOptions.Etcd.StorageConfig.Transport
	cfg := clientv3.Config{Endpoints: t.ServerList, DialTimeout: 20 * time.Second}
	if t.CertFile != "" || t.KeyFile != "" || t.TrustedCAFile != "" {
		tlsConfig, err := (transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.TrustedCAFile}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd client TLS: %w", err)
		}
		cfg.TLS = tlsConfig
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd %v: %w", t.ServerList, err)
	}
	return client, nil
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

// identity names this replica in the leader election.
func identity() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s_%x", host, b)
}
