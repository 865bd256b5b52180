package standalone

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/klog/v2"
)

// Etcd is an etcd server running inside the rekey-apiserver process.
type Etcd struct {
	server    *embed.Etcd
	ClientURL string
}

// FreeLoopbackURL returns an http URL on a loopback port that was free a
// moment ago.
func FreeLoopbackURL() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free loopback port: %w", err)
	}
	defer l.Close()
	return "http://" + l.Addr().String(), nil
}

// StartEtcd runs a single-member etcd with its data in dir, serving clients
// on clientURL (loopback only). It returns once etcd is ready.
func StartEtcd(ctx context.Context, dir, clientURL string) (*Etcd, error) {
	peerURL, err := FreeLoopbackURL()
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "rekey"
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cu, err := url.Parse(clientURL)
	if err != nil {
		return nil, fmt.Errorf("parsing etcd client URL %q: %w", clientURL, err)
	}
	pu, _ := url.Parse(peerURL)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// Keep the history small: a standalone server is a single member and
	// the API server compacts on its own schedule as well.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "1h"

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd in %s: %w", cfg.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed: %w", err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s was not ready within 60s", cfg.Dir)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	klog.FromContext(ctx).Info("Embedded etcd is ready", "dataDir", cfg.Dir, "clientURL", clientURL)
	return &Etcd{server: e, ClientURL: clientURL}, nil
}

// Close stops etcd and waits for it to flush.
func (e *Etcd) Close() { e.server.Close() }
