package apiserver

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"

	"rekey.io/rekey/pkg/quietlog"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/keksecret"
	"rekey.io/rekey/pkg/standalone"
)

// EtcdConfig locates rekey's private data in etcd.
type EtcdConfig struct {
	// Transport is the API storage's etcd transport: the private data lives
	// in the same etcd.
	Transport storagebackend.TransportConfig
	// PrivatePrefix is the etcd prefix of data the API never serves: CA
	// keys and bindings, issuance records, the leader election.
	PrivatePrefix string
	// Embedded is the etcd running inside the process (standalone mode),
	// started before the generic configuration is built so that its
	// clients find it at once; the server closes it when it stops.
	Embedded *standalone.Etcd
}

// newEtcdClient connects to the same etcd as the API storage.
func newEtcdClient(t storagebackend.TransportConfig) (*clientv3.Client, error) {
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

// newEtcdKeyStore opens the Etcd key store with the configured
// key-encryption key (a file, or a Secret of the host cluster that is
// created on first start). A key other than the one used before fails here
// and changes nothing.
func newEtcdKeyStore(ctx context.Context, client *clientv3.Client, prefix string, keys KeyStoresConfig, kube *restclient.Config) (*signing.EtcdKeyStore, error) {
	var kek []byte
	var err error
	switch {
	case keys.KEKSecret.Name != "":
		if kube == nil {
			return nil, fmt.Errorf("the key-encryption key Secret %s needs a cluster (--kubeconfig or in-cluster)", keys.KEKSecret)
		}
		var kubeClient kubernetes.Interface
		if kubeClient, err = kubernetes.NewForConfig(kube); err == nil {
			// The Secret holds the key of every CA key: its read and
			// create must never be dumped into the log (package quietlog).
			kek, err = keksecret.Ensure(quietlog.Context(ctx), kubeClient.CoreV1(), keys.KEKSecret)
		}
	default:
		kek, err = signing.LoadKEK(keys.KEKFile)
	}
	if err != nil {
		return nil, err
	}
	defer clear(kek)
	return signing.NewEtcdKeyStore(ctx, client, prefix, kek)
}
