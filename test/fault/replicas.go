package fault

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"

	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/standalone"
	"rekey.io/rekey/test/framework"
)

// leaseDuration is the replicas' leader lease: short, so that a killed or
// paused leader is replaced within the run's fault windows.
const leaseDuration = 4 * time.Second

// electionPrefix is where the replicas campaign (the default
// --etcd-private-prefix and the manager's key).
const electionPrefix = "/rekey.io-private/leader"

// replica is one rekey-apiserver of the set. Its port and data directory
// stay for the run; each start is a new process with a log of its own (a
// restart must not truncate the log of the process it replaced).
type replica struct {
	index   int
	dataDir string
	port    int
	args    []string

	mu   sync.Mutex
	proc *framework.Standalone
	logs []string // every incarnation's log, oldest first
	// paused is set while the process is stopped with SIGSTOP.
	paused bool

	// What the current incarnation's log has said so far, read a piece at
	// a time (a long run's log is large): its election identity, and
	// whether its last word on leadership was that it leads.
	scanned int64
	partial string
	id      string
	leads   bool
}

type replicaSet struct {
	t        testing.TB
	binary   string
	replicas []*replica
	etcd     *clientv3.Client
	// admin and node are per replica: clients whose requests time out
	// quickly, so a paused replica costs the load a timeout, not a hang.
	admin []clientset.Interface
	node  []clientset.Interface
}

// startReplicas runs n rekey-apiserver replicas on the etcd cluster. They
// share the PKI (and so the key-encryption key) of the first, as replicas
// of a Deployment share their Secrets.
func startReplicas(t testing.TB, n int, etcd *framework.EtcdCluster, extraArgs ...string) *replicaSet {
	t.Helper()
	rs := &replicaSet{t: t, binary: framework.Binary(t, "rekey-apiserver"), etcd: etcd.Client(t)}
	args := append(append([]string{"--leader-elect-lease-duration=" + leaseDuration.String(),
		// The load's NodeClient creates come from a few node identities
		// far faster than kubelets would: the per-requester limit is not
		// what this suite tests.
		"--requester-issuance-burst=0"}, etcd.RekeyArgs()...), extraArgs...)
	for i := 0; i < n; i++ {
		r := &replica{index: i, dataDir: t.TempDir(), port: framework.FreePort(t), args: args}
		if i > 0 {
			if out, err := exec.Command("cp", "-a", filepath.Join(rs.replicas[0].dataDir, "pki"), filepath.Join(r.dataDir, "pki")).CombinedOutput(); err != nil {
				t.Fatalf("copying PKI: %v %s", err, out)
			}
		}
		if err := rs.start(r); err != nil {
			t.Fatal(err)
		}
		rs.replicas = append(rs.replicas, r)
	}
	t.Cleanup(func() {
		for _, r := range rs.replicas {
			r.mu.Lock()
			p := r.proc
			if r.paused {
				_ = p.Signal(syscall.SIGCONT)
			}
			r.mu.Unlock()
			if p != nil {
				p.Stop(t)
			}
		}
		if t.Failed() {
			for _, r := range rs.replicas {
				t.Logf("replica %d log (tail):\n%s", r.index, r.logTail(6000))
			}
		}
	})
	for _, r := range rs.replicas {
		rs.admin = append(rs.admin, rs.clientFor(r, nil))
		rs.node = append(rs.node, rs.clientFor(r, []string{"system:node:fault-node", "system:nodes"}))
	}
	return rs
}

// start launches a new incarnation of r and waits until it is ready.
func (rs *replicaSet) start(r *replica) error {
	logDir := rs.t.TempDir()
	var s *framework.Standalone
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		s, err = framework.LaunchStandalone(logDir, rs.binary, r.dataDir, r.port, nil, r.args...)
		if err == nil {
			break
		}
		if s != nil {
			s.Kill()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s != nil {
		r.proc = s
		r.logs = append(r.logs, filepath.Join(logDir, "rekey-apiserver.log"))
		r.scanned, r.partial, r.id, r.leads = 0, "", "", false
	}
	if err != nil {
		return fmt.Errorf("replica %d: %w", r.index, err)
	}
	return nil
}

// clientFor is a client of replica r with a 10 s request timeout: as
// admin (user nil) or as the given user and groups (a client certificate
// of the shared standalone PKI).
func (rs *replicaSet) clientFor(r *replica, userAndGroups []string) clientset.Interface {
	cfg := rest.CopyConfig(r.proc.Config)
	cfg.Timeout = 10 * time.Second
	if userAndGroups != nil {
		certPEM, keyPEM, err := standalone.PKI{Dir: filepath.Join(r.dataDir, "pki")}.IssueClientCertificate(userAndGroups[0], userAndGroups[1:])
		if err != nil {
			rs.t.Fatal(err)
		}
		cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.KeyData = certPEM, keyPEM
		cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile = "", ""
	}
	c, err := clientset.NewForConfig(cfg)
	if err != nil {
		rs.t.Fatal(err)
	}
	return c
}

func (r *replica) process() *framework.Standalone {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc
}

// logTail is the end of the current incarnation's log.
func (r *replica) logTail(n int) string {
	if p := r.process(); p != nil {
		return p.LogTail(n)
	}
	return ""
}

// log is the current incarnation's whole log.
func (r *replica) log() string {
	if p := r.process(); p != nil {
		return p.Log()
	}
	return ""
}

// ready asks the current incarnation's /readyz.
func (r *replica) ready(ctx context.Context) error {
	p := r.process()
	if p == nil || p.Exited() {
		return fmt.Errorf("replica %d is not running", r.index)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	body, err := p.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("replica %d: readyz: %w", r.index, err)
	}
	if string(body) != "ok" {
		return fmt.Errorf("replica %d: readyz: %s", r.index, body)
	}
	return nil
}

// metric is the sum of a counter's series on the current incarnation's
// /metrics, as text ("?" when it cannot be read).
func (r *replica) metric(name string) string {
	p := r.process()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body, err := p.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return "?"
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		if f := strings.Fields(line); len(f) >= 2 {
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err == nil {
				sum += v
			}
		}
	}
	return strconv.FormatFloat(sum, 'f', -1, 64)
}

// kill ends the replica's process with SIGKILL (a stopped process dies
// of it too).
func (r *replica) kill() {
	r.mu.Lock()
	p := r.proc
	r.paused = false
	r.mu.Unlock()
	p.Kill()
}

// pause stops the process with SIGSTOP; resume continues it.
func (r *replica) pause() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paused = true
	return r.proc.Signal(syscall.SIGSTOP)
}

func (r *replica) resume() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paused = false
	return r.proc.Signal(syscall.SIGCONT)
}

var identityRE = regexp.MustCompile(`"Campaigning for leadership"[^\n]*identity="([^"]+)"`)

// scan reads what the current incarnation logged since the last scan.
func (r *replica) scan() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.logs) == 0 {
		return
	}
	f, err := os.Open(r.logs[len(r.logs)-1])
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Seek(r.scanned, io.SeekStart); err != nil {
		return
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return
	}
	r.scanned += int64(len(data))
	text := r.partial + string(data)
	cut := strings.LastIndexByte(text, '\n') + 1
	r.partial = text[cut:]
	for _, line := range strings.Split(text[:cut], "\n") {
		switch {
		case strings.Contains(line, `"Campaigning for leadership"`):
			if m := identityRE.FindStringSubmatch(line); m != nil {
				r.id = m[1]
			}
			r.leads = false
		case strings.Contains(line, `"Became leader"`):
			r.leads = true
		case strings.Contains(line, `"Lease deadline passed`), strings.Contains(line, `"Lost leadership`):
			r.leads = false
		}
	}
}

// identity is the election identity of the current incarnation, from its
// log ("" until it has campaigned).
func (r *replica) identity() string {
	r.scan()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.id
}

// saysItLeads: the current incarnation's last word on leadership is
// "Became leader" (a replica whose key is oldest may still be inside its
// campaign).
func (r *replica) saysItLeads() bool {
	r.scan()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leads
}

// leader is the replica whose election key is the oldest under the
// election prefix (the etcd election's leader), or nil with why not.
func (rs *replicaSet) leader(ctx context.Context) (*replica, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := rs.etcd.Get(ctx, electionPrefix+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("reading the election: %w", err)
	}
	kvs := resp.Kvs
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].CreateRevision < kvs[j].CreateRevision })
	if len(kvs) == 0 {
		return nil, fmt.Errorf("no replica campaigns")
	}
	id := string(kvs[0].Value)
	for _, r := range rs.replicas {
		if r.identity() == id {
			if !r.saysItLeads() {
				return nil, fmt.Errorf("replica %d holds the oldest election key but has not logged that it leads yet", r.index)
			}
			return r, nil
		}
	}
	return nil, fmt.Errorf("the leader %q is no running replica's identity", id)
}
