package standalone

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/logutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/pki"
)

const (
	// etcdClientSocket is the embedded etcd's client socket in the data
	// directory.
	etcdClientSocket = "etcd.sock"
	// etcdPeerTLSDir holds the peer listener's throwaway TLS material.
	etcdPeerTLSDir = "etcd-peer-tls"
	// maxSocketPath is the longest path a unix socket may have on Linux
	// (sun_path is 108 bytes including the terminating NUL).
	maxSocketPath = 107
)

// Etcd is an etcd server running inside the rekey-apiserver process.
type Etcd struct {
	server *embed.Etcd
	// ClientURL is the unix socket clients connect to.
	ClientURL string

	inProcessOnce sync.Once
	inProcess     *InProcess
	// closing is set when Close begins; etcd's logger then drops the
	// errors of its listeners closing.
	closing *atomic.Bool
}

// EtcdClientURL is the etcd endpoint of a standalone server whose data is
// in dataDir: a unix socket, never a TCP port.
func EtcdClientURL(dataDir string) string {
	return "unix://" + filepath.Join(dataDir, etcdClientSocket)
}

// CheckEtcdDir refuses a directory whose path is too long for the etcd
// client socket in it. The options check it before they create the
// directory, so that a refused path leaves nothing behind.
func CheckEtcdDir(dir string) error {
	if clientSock := filepath.Join(dir, etcdClientSocket); len(clientSock) > maxSocketPath {
		return fmt.Errorf("%s is too long for etcd's unix socket %s (%d bytes, at most %d): choose a directory with a path at most %d bytes long",
			dir, clientSock, len(clientSock), maxSocketPath, maxSocketPath-len(etcdClientSocket)-1)
	}
	return nil
}

// StartEtcd runs a single-member etcd with its data in dir. No listener
// accepts an unauthenticated client: an etcd on a loopback TCP port would
// let any local process write an approved request straight into storage.
// Clients reach it on a unix socket in dir of mode 0600, so only the user
// rekey runs as (who can read the data directory anyway) can connect. The
// peer listener, which etcd cannot put on a socket with an absolute path,
// is on a loopback port with TLS client authentication against a CA made
// afresh at each start whose key never leaves the process's data
// directory. It returns once etcd is ready.
func StartEtcd(ctx context.Context, dir string) (*Etcd, error) {
	if err := CheckEtcdDir(dir); err != nil {
		return nil, err
	}
	clientSock := filepath.Join(dir, etcdClientSocket)
	// A socket left by a killed process would make listen fail.
	if err := os.Remove(clientSock); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("removing stale etcd socket: %w", err)
	}
	peerTLS, err := writePeerTLS(filepath.Join(dir, etcdPeerTLSDir))
	if err != nil {
		return nil, err
	}
	peerURL, err := freeLoopbackURL("https")
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "rekey"
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	closing := new(atomic.Bool)
	lg, err := etcdLogger(closing)
	if err != nil {
		return nil, err
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	cu := url.URL{Scheme: "unix", Path: clientSock}
	pu, err := url.Parse(peerURL)
	if err != nil {
		return nil, err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.PeerTLSInfo = peerTLS
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// No metrics or other extra listeners.
	cfg.ListenMetricsUrls = nil
	// Keep the history small: a standalone server is a single member and
	// the API server compacts on its own schedule as well.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "1h"

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd in %s: %w", cfg.Dir, err)
	}
	// The socket was created with the process umask; no other user may
	// connect.
	if err := os.Chmod(clientSock, 0o600); err != nil {
		e.Close()
		return nil, fmt.Errorf("restricting etcd socket %s: %w", clientSock, err)
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
	url := EtcdClientURL(dir)
	klog.FromContext(ctx).Info("Embedded etcd is ready", "dataDir", cfg.Dir, "clientURL", url)
	return &Etcd{server: e, ClientURL: url, closing: closing}, nil
}

// etcdLogger is etcd's default JSON logger at level error without stack
// traces, which dropped, while etcd closes, the error each of its
// listeners reports as it is closed ("setting up serving from embedded
// etcd failed.": "http: Server closed", "use of closed network
// connection"): a clean SIGTERM logs no error.
func etcdLogger(closing *atomic.Bool) (*zap.Logger, error) {
	zc := logutil.DefaultZapLoggerConfig
	zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	zc.DisableStacktrace = true
	lg, err := zc.Build(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return closingFilter{Core: c, closing: closing} }))
	if err != nil {
		return nil, fmt.Errorf("building the embedded etcd's logger: %w", err)
	}
	return lg, nil
}

// listenerClosedMessage is what etcd logs when a listener's Serve
// returns, closing or not (embed.Etcd.errHandler).
const listenerClosedMessage = "setting up serving from embedded etcd failed."

// closingFilter drops listenerClosedMessage once Close has begun.
type closingFilter struct {
	zapcore.Core
	closing *atomic.Bool
}

func (f closingFilter) With(fields []zapcore.Field) zapcore.Core {
	return closingFilter{Core: f.Core.With(fields), closing: f.closing}
}

func (f closingFilter) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if ent.Message == listenerClosedMessage && f.closing.Load() {
		return ce
	}
	return f.Core.Check(ent, ce)
}

// freeLoopbackURL returns a URL on a loopback port that was free a moment
// ago.
func freeLoopbackURL(scheme string) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free loopback port: %w", err)
	}
	defer func() { _ = l.Close() }() // only the port number was wanted
	return scheme + "://" + l.Addr().String(), nil
}

// writePeerTLS makes a CA and one certificate for both ends of the peer
// connection, in dir with mode 0700. etcd then accepts only peers that
// present a certificate from that CA, and the CA key is thrown away once
// the certificate is made.
func writePeerTLS(dir string) (transport.TLSInfo, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return transport.TLSInfo{}, fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return transport.TLSInfo{}, err
	}
	ca, err := pki.NewCA("rekey embedded etcd peer CA", 10*365*24*time.Hour)
	if err != nil {
		return transport.TLSInfo{}, err
	}
	peer, err := ca.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "rekey embedded etcd peer"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, 10*365*24*time.Hour)
	if err != nil {
		return transport.TLSInfo{}, err
	}
	info := transport.TLSInfo{
		CertFile:       filepath.Join(dir, "peer.crt"),
		KeyFile:        filepath.Join(dir, "peer.key"),
		TrustedCAFile:  filepath.Join(dir, "ca.crt"),
		ClientCertAuth: true,
	}
	if err := peer.Write(info.CertFile, info.KeyFile); err != nil {
		return transport.TLSInfo{}, err
	}
	if err := pki.WriteFileAtomic(info.TrustedCAFile, ca.CertPEM(), 0o600); err != nil {
		return transport.TLSInfo{}, err
	}
	return info, nil
}

// Close stops the in-process client, then etcd, and waits for it to flush.
func (e *Etcd) Close() {
	if e.inProcess != nil {
		e.inProcess.Close()
	}
	e.closing.Store(true)
	e.server.Close()
}
