package framework

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"rekey.io/rekey/pkg/pki"
)

// EtcdClusterOptions shapes StartEtcdCluster's cluster.
type EtcdClusterOptions struct {
	// Members is the number of members; 0 means 3.
	Members int
	// DiskBytes > 0: each member's data dir is a tmpfs of this size
	// (needs root); FillDisk/FreeDisk work only then. 0: plain dirs.
	DiskBytes int64
}

// EtcdCluster is a multi-member etcd of real etcd processes on loopback,
// with the TLS client authentication a production etcd has (https client
// URLs, --client-cert-auth) and a proxy in front of every member's peer
// listener through which the tests cut the network (peerproxy.go).
type EtcdCluster struct {
	Members []*EtcdMember
	// CAFile, ClientCertFile and ClientKeyFile are the PEM files rekey's
	// --etcd-cafile, --etcd-certfile and --etcd-keyfile name: the cluster's
	// CA and a client certificate (CN rekey) it signed.
	CAFile, ClientCertFile, ClientKeyFile string

	dir            string
	binary         string
	token          string
	initialCluster string
	diskBytes      int64
	peers          *peerNetwork
	tlsConfig      *tls.Config
}

// EtcdMember is one member of an EtcdCluster. Its ports and data dir stay
// for the cluster's lifetime; each start is a new process with a log of
// its own.
type EtcdMember struct {
	Index int
	// Name is m<Index>, etcd's --name.
	Name string
	// ClientURL is the member's https client URL.
	ClientURL string
	// PeerURL is the URL the member advertises to its peers: its proxy's.
	PeerURL string
	// ID is the etcd member ID.
	ID uint64

	cluster       *EtcdCluster
	listenPeerURL string
	certFile      string
	keyFile       string
	// dir holds the data dir and FillDisk's ballast: the tmpfs mount
	// point when mounted.
	dir     string
	dataDir string
	mounted bool
	// diskErr says why the member has no tmpfs (FillDisk's error).
	diskErr error
	// client talks to this member alone (Leader, Healthy).
	client *clientv3.Client

	// startMu serializes starts; mu guards proc, which Running and Kill
	// read while a start waits.
	startMu sync.Mutex
	runs    int
	mu      sync.Mutex
	proc    *Process
}

const (
	// etcdSnapshotCount is small enough that a member cut off for a while
	// may be sent a snapshot when it comes back, through the proxies.
	etcdSnapshotCount = 5000
	etcdStartTimeout  = 60 * time.Second
	etcdCertValidity  = 24 * time.Hour
	// ballastChunk is FillDisk's write size.
	ballastChunk = 1 << 20
)

// errPortTaken marks an etcd that could not bind a port someone else took
// since FreePorts found it free: the start can be tried again.
var errPortTaken = errors.New("a port was taken")

// StartEtcdCluster starts the cluster and returns once every member
// answers a linearizable read. The test's cleanup stops the members and
// unmounts their tmpfs.
func StartEtcdCluster(t testing.TB, opts EtcdClusterOptions) *EtcdCluster {
	t.Helper()
	if opts.Members == 0 {
		opts.Members = 3
	}
	toolsDir, err := BuildTools("etcd")
	if err != nil {
		t.Fatal(err)
	}
	token := make([]byte, 8)
	if _, err := rand.Read(token); err != nil {
		t.Fatal(err)
	}
	c := &EtcdCluster{
		dir:       t.TempDir(),
		binary:    filepath.Join(toolsDir, "etcd"),
		token:     "rekey-test-" + hex.EncodeToString(token),
		diskBytes: opts.DiskBytes,
		peers:     newPeerNetwork(),
	}
	// Registered before anything starts, so that a failed start is
	// cleaned up too (and before the TempDir's removal, which runs after:
	// a mounted tmpfs would make it fail).
	t.Cleanup(c.stop)
	if err := c.makePKI(opts.Members); err != nil {
		t.Fatal(err)
	}
	ports, err := FreePorts(2 * opts.Members)
	if err != nil {
		t.Fatal(err)
	}
	var initial []string
	for i := 0; i < opts.Members; i++ {
		m := &EtcdMember{
			Index: i, Name: fmt.Sprintf("m%d", i), cluster: c,
			certFile: filepath.Join(c.dir, "pki", fmt.Sprintf("m%d.crt", i)),
			keyFile:  filepath.Join(c.dir, "pki", fmt.Sprintf("m%d.key", i)),
			dir:      filepath.Join(c.dir, fmt.Sprintf("m%d", i)),
		}
		m.dataDir = filepath.Join(m.dir, "data")
		m.setPorts(ports[2*i], ports[2*i+1])
		proxy, err := c.peers.listen(i)
		if err != nil {
			t.Fatal(err)
		}
		m.PeerURL = "http://" + proxy.addr()
		proxy.serve(strings.TrimPrefix(m.listenPeerURL, "http://"))
		if err := os.Mkdir(m.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := m.mountDisk(opts.DiskBytes); err != nil {
			t.Fatal(err)
		}
		initial = append(initial, m.Name+"="+m.PeerURL)
		c.Members = append(c.Members, m)
	}
	c.initialCluster = strings.Join(initial, ",")
	if c.tlsConfig, err = (transport.TLSInfo{CertFile: c.ClientCertFile, KeyFile: c.ClientKeyFile, TrustedCAFile: c.CAFile}).ClientConfig(); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Members {
		if err := m.start(true); err != nil {
			t.Fatal(err)
		}
		// The member's own client is made after its start: a port race
		// at the first start moves its client URL.
		if m.client, err = c.newClient([]string{m.ClientURL}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range c.Members {
		if err := waitFor(etcdStartTimeout, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return m.Healthy(ctx)
		}); err != nil {
			t.Fatalf("etcd member %s not healthy: %v\n%s", m.Name, err, m.LogTail(4000))
		}
	}
	if err := c.learnIDs(); err != nil {
		t.Fatal(err)
	}
	return c
}

// makePKI writes the cluster's CA, a serving certificate per member and
// rekey's client certificate under dir/pki.
func (c *EtcdCluster) makePKI(members int) error {
	dir := filepath.Join(c.dir, "pki")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	ca, err := pki.NewCA("rekey-test-etcd-ca", etcdCertValidity)
	if err != nil {
		return err
	}
	c.CAFile = filepath.Join(dir, "ca.crt")
	if err := pki.WriteFileAtomic(c.CAFile, ca.CertPEM(), 0o644); err != nil {
		return err
	}
	for i := 0; i < members; i++ {
		// A member is a TLS client too: its gRPC gateway dials its own
		// client URL with this certificate.
		kp, err := ca.Issue(&x509.Certificate{
			Subject:     pkix.Name{CommonName: fmt.Sprintf("m%d", i)},
			DNSNames:    []string{"localhost"},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		}, etcdCertValidity)
		if err != nil {
			return err
		}
		if err := kp.Write(filepath.Join(dir, fmt.Sprintf("m%d.crt", i)), filepath.Join(dir, fmt.Sprintf("m%d.key", i))); err != nil {
			return err
		}
	}
	client, err := ca.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "rekey"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, etcdCertValidity)
	if err != nil {
		return err
	}
	c.ClientCertFile, c.ClientKeyFile = filepath.Join(dir, "rekey.crt"), filepath.Join(dir, "rekey.key")
	return client.Write(c.ClientCertFile, c.ClientKeyFile)
}

// learnIDs tells the peer proxies which member each etcd member ID is.
func (c *EtcdCluster) learnIDs() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Members[0].client.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("listing etcd members: %w", err)
	}
	ids := map[uint64]int{}
	for _, pm := range resp.Members {
		for _, m := range c.Members {
			if pm.Name == m.Name {
				m.ID = pm.ID
				ids[pm.ID] = m.Index
			}
		}
	}
	for _, m := range c.Members {
		if m.ID == 0 {
			return fmt.Errorf("etcd's member list %v has no member %s", resp.Members, m.Name)
		}
	}
	c.peers.setIDs(ids)
	return nil
}

// stop ends every member, the proxies and the tmpfs mounts, in that order
// (a mount in use by a live etcd would only detach).
func (c *EtcdCluster) stop() {
	for _, m := range c.Members {
		if m.client != nil {
			_ = m.client.Close()
		}
	}
	var wg sync.WaitGroup
	for _, m := range c.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.process().Stop(10 * time.Second)
		}()
	}
	wg.Wait()
	c.peers.close()
	for _, m := range c.Members {
		m.unmountDisk()
	}
}

// Endpoints are the members' https client URLs.
func (c *EtcdCluster) Endpoints() []string {
	var urls []string
	for _, m := range c.Members {
		urls = append(urls, m.ClientURL)
	}
	return urls
}

// RekeyArgs are rekey-apiserver's flags for this cluster.
func (c *EtcdCluster) RekeyArgs() []string {
	return []string{
		"--etcd-servers=" + strings.Join(c.Endpoints(), ","),
		"--etcd-cafile=" + c.CAFile,
		"--etcd-certfile=" + c.ClientCertFile,
		"--etcd-keyfile=" + c.ClientKeyFile,
	}
}

// Client is a client with rekey's certificate to every member, closed when
// the test ends.
func (c *EtcdCluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	client, err := c.newClient(c.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// MemberClient is Client to member i alone: its requests fail rather than
// go to another member.
func (c *EtcdCluster) MemberClient(t testing.TB, i int) *clientv3.Client {
	t.Helper()
	client, err := c.newClient([]string{c.Members[i].ClientURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func (c *EtcdCluster) newClient(endpoints []string) (*clientv3.Client, error) {
	client, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: c.tlsConfig.Clone(), DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("etcd client of %v: %w", endpoints, err)
	}
	return client, nil
}

// Leader is the member that a majority of the cluster, itself included,
// names as leader. A member cut off from its peers may still name an old
// leader (or none) for a while; the majority's answer is the one writes
// go through.
func (c *EtcdCluster) Leader(ctx context.Context) (*EtcdMember, error) {
	type answer struct {
		m      *EtcdMember
		leader uint64
		err    error
	}
	answers := make(chan answer, len(c.Members))
	for _, m := range c.Members {
		go func() {
			if !m.Running() {
				answers <- answer{m: m, err: errors.New("not running")}
				return
			}
			// Each member gets a short time of its own: one that hangs
			// must not use up the others' time.
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			st, err := m.client.Status(ctx, m.ClientURL)
			if err != nil {
				answers <- answer{m: m, err: err}
				return
			}
			answers <- answer{m: m, leader: st.Leader}
		}()
	}
	named := map[uint64]int{}
	self := map[uint64]bool{}
	var said []string
	for range c.Members {
		a := <-answers
		if a.err != nil {
			said = append(said, fmt.Sprintf("%s: %v", a.m.Name, a.err))
			continue
		}
		said = append(said, fmt.Sprintf("%s: leader %x", a.m.Name, a.leader))
		if a.leader == 0 {
			continue
		}
		named[a.leader]++
		if a.leader == a.m.ID {
			self[a.m.ID] = true
		}
	}
	quorum := len(c.Members)/2 + 1
	for _, m := range c.Members {
		if named[m.ID] >= quorum && self[m.ID] {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no etcd leader named by a majority including itself (%s)", strings.Join(said, "; "))
}

// Healthy reports whether the member is running and serves a
// linearizable read through its own endpoint, which needs a leader it can
// reach and an applied index caught up with the leader's commit index.
func (m *EtcdMember) Healthy(ctx context.Context) error {
	if !m.Running() {
		p := m.process()
		if p == nil {
			return fmt.Errorf("etcd %s is not running", m.Name)
		}
		return fmt.Errorf("etcd %s exited (%w)", m.Name, errExited)
	}
	if _, err := m.client.Get(ctx, "health"); err != nil {
		return fmt.Errorf("etcd %s: a linearizable read: %w", m.Name, err)
	}
	return nil
}

func (m *EtcdMember) setPorts(client, peer int) {
	m.ClientURL = fmt.Sprintf("https://127.0.0.1:%d", client)
	m.listenPeerURL = fmt.Sprintf("http://127.0.0.1:%d", peer)
}

func (m *EtcdMember) ports() (client, peer int) {
	port := func(u string) int {
		n, _ := strconv.Atoi(u[strings.LastIndex(u, ":")+1:])
		return n
	}
	return port(m.ClientURL), port(m.listenPeerURL)
}

// args are the member's flags, the same on every start: etcd ignores the
// --initial-cluster* flags once its data dir holds a member.
func (m *EtcdMember) args() []string {
	c := m.cluster
	return []string{
		"--name=" + m.Name,
		"--data-dir=" + m.dataDir,
		"--listen-client-urls=" + m.ClientURL, "--advertise-client-urls=" + m.ClientURL,
		"--cert-file=" + m.certFile, "--key-file=" + m.keyFile,
		"--trusted-ca-file=" + c.CAFile, "--client-cert-auth",
		// Peer traffic is plain HTTP on loopback, through the member's
		// proxy: the proxy reads X-Server-From from each connection's
		// first request to know whose connection it is, which TLS would
		// hide (peerproxy.go).
		"--listen-peer-urls=" + m.listenPeerURL, "--initial-advertise-peer-urls=" + m.PeerURL,
		"--initial-cluster=" + c.initialCluster,
		"--initial-cluster-state=new", "--initial-cluster-token=" + c.token,
		"--snapshot-count=" + strconv.Itoa(etcdSnapshotCount),
		"--log-level=warn",
	}
}

// start runs the member's process and waits until it listens. fresh (the
// cluster's first start, nothing advertised yet but the proxy's URL): a
// port taken meanwhile is replaced by another. Otherwise the ports are the
// member's for good, and the start is tried again until the port is free.
func (m *EtcdMember) start(fresh bool) error {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	if m.Running() {
		return fmt.Errorf("etcd %s is running", m.Name)
	}
	return EventuallyErr(30*time.Second, func(context.Context) error {
		p, err := Start(m.cluster.dir, fmt.Sprintf("etcd-%s-%d", m.Name, m.runs), m.cluster.binary, m.args()...)
		m.runs++
		if err != nil {
			return Permanent(err)
		}
		m.mu.Lock()
		m.proc = p
		m.mu.Unlock()
		err = m.waitListening(p)
		if !errors.Is(err, errPortTaken) {
			return Permanent(err)
		}
		if fresh {
			ports, perr := FreePorts(2)
			if perr != nil {
				return Permanent(perr)
			}
			m.setPorts(ports[0], ports[1])
			// A member that failed to bind wrote nothing, but start
			// the next one on an empty data dir all the same.
			if rerr := os.RemoveAll(m.dataDir); rerr != nil {
				return Permanent(rerr)
			}
		}
		return err
	})
}

// waitListening waits until p listens on the member's client and peer
// ports, which etcd binds before it reads its data dir.
func (m *EtcdMember) waitListening(p *Process) error {
	client, peer := m.ports()
	return EventuallyErr(20*time.Second, func(context.Context) error {
		if p.Exited() {
			log := p.LogTail(4000)
			if strings.Contains(log, "address already in use") {
				return Permanent(fmt.Errorf("etcd %s: %w:\n%s", m.Name, errPortTaken, log))
			}
			return Permanent(fmt.Errorf("etcd %s exited (%w):\n%s", m.Name, errExited, log))
		}
		if !tcpListening(client) || !tcpListening(peer) {
			return fmt.Errorf("etcd %s does not listen on ports %d and %d yet", m.Name, client, peer)
		}
		return nil
	})
}

// tcpListening reports whether a socket listens on 127.0.0.1:port. It
// reads /proc/net/tcp rather than connecting: a connection closed before
// its TLS handshake is a line in etcd's log.
func tcpListening(port int) bool {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	local := fmt.Sprintf("0100007F:%04X", port)
	s := bufio.NewScanner(f)
	for s.Scan() {
		// sl local_address rem_address st ...; st 0A is LISTEN.
		fields := strings.Fields(s.Text())
		if len(fields) > 3 && fields[1] == local && fields[3] == "0A" {
			return true
		}
	}
	return false
}

func (m *EtcdMember) process() *Process {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc
}

// Kill ends the member with SIGKILL, as a crash would, and waits for it to
// exit.
func (m *EtcdMember) Kill() { m.process().Kill() }

// Restart starts the member again on its data dir and ports (after Kill or
// a crash) and returns once the process runs and listens; it may not be
// healthy yet.
func (m *EtcdMember) Restart() error { return m.start(false) }

// Running reports whether the member's process runs.
func (m *EtcdMember) Running() bool {
	p := m.process()
	return p != nil && !p.Exited()
}

// Partition cuts every peer connection to and from the member and refuses
// new ones until Heal; its clients still reach it.
func (m *EtcdMember) Partition() { m.cluster.peers.partition(m.Index) }

// Heal lets the member's peer connections through again.
func (m *EtcdMember) Heal() { m.cluster.peers.heal(m.Index) }

// ballast is FillDisk's file, beside the data dir on the member's tmpfs.
func (m *EtcdMember) ballast() string { return filepath.Join(m.dir, "ballast") }

// FillDisk fills the member's tmpfs with a ballast file, so that etcd's
// next write that needs space fails with ENOSPC. It needs a cluster
// started with DiskBytes as root.
func (m *EtcdMember) FillDisk() error {
	if !m.mounted {
		return fmt.Errorf("filling etcd %s's disk: %w", m.Name, m.diskErr)
	}
	f, err := os.OpenFile(m.ballast(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("filling etcd %s's disk: %w", m.Name, err)
	}
	chunk := make([]byte, ballastChunk)
	for {
		if _, err = f.Write(chunk); err != nil {
			break
		}
	}
	cerr := f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("filling etcd %s's disk: %w", m.Name, err)
	}
	if cerr != nil && !errors.Is(cerr, syscall.ENOSPC) {
		return fmt.Errorf("filling etcd %s's disk: %w", m.Name, cerr)
	}
	return nil
}

// DiskFillable says why FillDisk cannot work on this member (nil: it
// can): its data dir is not a tmpfs of its own (not root, or no
// DiskBytes).
func (m *EtcdMember) DiskFillable() error {
	if !m.mounted {
		return m.diskErr
	}
	return nil
}

// FreeDisk removes FillDisk's ballast.
func (m *EtcdMember) FreeDisk() error {
	if err := os.Remove(m.ballast()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("freeing etcd %s's disk: %w", m.Name, err)
	}
	return nil
}

// LogTail is the end of the log of the member's latest process.
func (m *EtcdMember) LogTail(n int) string {
	p := m.process()
	if p == nil {
		return ""
	}
	return p.LogTail(n)
}

// DiskUsage says how full the member's disk is and what holds it (its
// WAL, snapshots and backend), for a message about a member that exited.
func (m *EtcdMember) DiskUsage() string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(m.dir, &st); err != nil {
		return fmt.Sprintf("disk of etcd %s: %v", m.Name, err)
	}
	total, free := st.Blocks*uint64(st.Bsize), st.Bavail*uint64(st.Bsize)
	var b strings.Builder
	fmt.Fprintf(&b, "disk of etcd %s (tmpfs %t): %d of %d bytes used", m.Name, m.mounted, total-free, total)
	_ = filepath.WalkDir(m.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			rel, _ := filepath.Rel(m.dir, path)
			fmt.Fprintf(&b, "\n  %s %d", rel, info.Size())
		}
		return nil
	})
	return b.String()
}

// mountDisk mounts a tmpfs of size bytes on the member's dir (size > 0,
// as root). Elsewhere the dir stays a plain one and FillDisk says why.
func (m *EtcdMember) mountDisk(size int64) error {
	switch {
	case size <= 0:
		m.diskErr = errors.New("the cluster was started without DiskBytes")
		return nil
	case os.Geteuid() != 0:
		m.diskErr = errors.New("mounting a tmpfs of DiskBytes needs root")
		return nil
	}
	if err := syscall.Mount("tmpfs", m.dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		return fmt.Errorf("mounting a tmpfs of %d bytes on %s: %w", size, m.dir, err)
	}
	m.mounted = true
	return nil
}

// unmountDisk unmounts the member's tmpfs, lazily when something still
// holds it.
func (m *EtcdMember) unmountDisk() {
	if !m.mounted {
		return
	}
	if err := syscall.Unmount(m.dir, 0); err != nil {
		_ = syscall.Unmount(m.dir, syscall.MNT_DETACH)
	}
	m.mounted = false
}
