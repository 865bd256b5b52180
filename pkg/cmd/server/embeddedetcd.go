package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"rekey.io/rekey/pkg/standalone"
)

// EmbeddedEtcdOptions run an etcd inside the process, reachable only on a
// unix socket in its directory: the default storage of a single replica in a
// cluster (on a PersistentVolume) and of standalone mode.
type EmbeddedEtcdOptions struct {
	// Dir holds the embedded etcd's data and socket; empty means none.
	Dir string
}

// NewEmbeddedEtcdOptions returns the defaults: no embedded etcd.
func NewEmbeddedEtcdOptions() *EmbeddedEtcdOptions { return &EmbeddedEtcdOptions{} }

// AddFlags adds the embedded etcd's flag.
func (o *EmbeddedEtcdOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Dir, "embedded-etcd-dir", o.Dir,
		"Run an etcd inside rekey-apiserver with its data in this directory, reachable only on a unix socket there (mode 0600). "+
			"For one replica: replicas cannot share it. Exclusive with --etcd-servers; --standalone without --etcd-servers uses --data-dir.")
}

// Complete points the storage at the embedded etcd's socket.
func (o *EmbeddedEtcdOptions) Complete(ro *genericoptions.RecommendedOptions) error {
	if o.Dir == "" {
		return nil
	}
	if len(ro.Etcd.StorageConfig.Transport.ServerList) > 0 {
		return errors.New("--embedded-etcd-dir and --etcd-servers are exclusive: rekey stores its data in one etcd")
	}
	var err error
	if o.Dir, err = privateDir("--embedded-etcd-dir", o.Dir); err != nil {
		return err
	}
	ro.Etcd.StorageConfig.Transport.ServerList = []string{standalone.EtcdClientURL(o.Dir)}
	return nil
}

// Start starts the embedded etcd; nil when there is none.
func (o *EmbeddedEtcdOptions) Start(ctx context.Context) (*standalone.Etcd, error) {
	if o.Dir == "" {
		return nil, nil
	}
	return standalone.StartEtcd(ctx, o.Dir)
}

// privateDir makes the directory a flag names (mode 0700 when it is new)
// and returns its absolute path. Both directories that use it hold the
// embedded etcd's socket: a path too long for it is refused before
// anything is created.
func privateDir(flag, dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", flag, err)
	}
	if err := standalone.CheckEtcdDir(abs); err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("creating %s: %w", flag, err)
	}
	return abs, nil
}
