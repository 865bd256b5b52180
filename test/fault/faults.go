package fault

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"rekey.io/rekey/test/framework"
)

// faultKind names a fault the injector knows.
type faultKind string

const (
	faultEtcdLeaderKill   faultKind = "etcd-leader-sigkill"
	faultRekeyLeaderKill  faultKind = "rekey-leader-sigkill"
	faultRekeyLeaderPause faultKind = "rekey-leader-sigstop-past-lease"
	faultEtcdPartition    faultKind = "etcd-member-partition"
	faultEtcdDiskFull     faultKind = "etcd-member-disk-full"
	faultRollingRestart   faultKind = "rekey-rolling-restart"
)

var allFaults = []faultKind{faultEtcdLeaderKill, faultRekeyLeaderKill, faultRekeyLeaderPause, faultEtcdPartition, faultEtcdDiskFull, faultRollingRestart}

// faultKinds are the kinds a run on etcd can inject, and why any is left
// out.
func faultKinds(etcd *framework.EtcdCluster) ([]faultKind, string) {
	if err := etcd.Members[0].DiskFillable(); err != nil {
		var kinds []faultKind
		for _, k := range allFaults {
			if k != faultEtcdDiskFull {
				kinds = append(kinds, k)
			}
		}
		return kinds, fmt.Sprintf("%s is left out: %v", faultEtcdDiskFull, err)
	}
	return allFaults, ""
}

// injected is one fault as it happened: from its injection to the moment
// everything was healthy again.
type injected struct {
	Kind       faultKind
	Start, End time.Time
	Detail     string
	// Effect is what the fault did, where that can differ from run to
	// run (a full disk: whether etcd exited).
	Effect string
}

// injector injects faults one after the other, each followed by a wait
// until the cluster is whole again, with quiet gaps between them.
type injector struct {
	t    testing.TB
	etcd *framework.EtcdCluster
	rs   *replicaSet
	// kinds are the faults this run injects: allFaults, without the full
	// disk when the members' disks cannot be filled (not root).
	kinds []faultKind

	mu   sync.Mutex
	done []injected
}

func (in *injector) injected() []injected {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]injected(nil), in.done...)
}

// run injects faults until ctx is done: every kind once in a shuffled
// round, round after round, so that each kind is injected several times
// in a run of a few minutes. A fault that cannot be injected or recovered
// from fails the test: the run's results would mean nothing.
func (in *injector) run(ctx context.Context, rng *mathrand.Rand) error {
	for ctx.Err() == nil {
		round := append([]faultKind(nil), in.kinds...)
		rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		for _, kind := range round {
			pace(ctx, time.Duration(2000+rng.Intn(4000))*time.Millisecond)
			if ctx.Err() != nil {
				return nil
			}
			f := injected{Kind: kind, Start: time.Now()}
			in.t.Logf("fault %s: injecting", kind)
			detail, effect, err := in.inject(kind, rng)
			if err != nil {
				return fmt.Errorf("fault %s: %w", kind, err)
			}
			if err := in.whole(); err != nil {
				return fmt.Errorf("after fault %s (%s): %w", kind, detail, err)
			}
			f.End, f.Detail, f.Effect = time.Now(), detail, effect
			in.t.Logf("fault %s: %s; whole again after %s", kind, detail, f.End.Sub(f.Start).Round(time.Millisecond))
			in.mu.Lock()
			in.done = append(in.done, f)
			in.mu.Unlock()
		}
	}
	return nil
}

func hold(rng *mathrand.Rand, minMS, spreadMS int) time.Duration {
	return time.Duration(minMS+rng.Intn(spreadMS)) * time.Millisecond
}

// inject injects one fault and undoes it (restart, resume, heal, free),
// returning what it did.
func (in *injector) inject(kind faultKind, rng *mathrand.Rand) (detail, effect string, err error) {
	ctx := context.Background()
	switch kind {
	case faultEtcdLeaderKill:
		m, err := in.etcd.Leader(ctx)
		if err != nil {
			return "", "", err
		}
		m.Kill()
		d := hold(rng, 1000, 5000)
		pace(context.Background(), d) // the fault lasts d; the load runs meanwhile
		return fmt.Sprintf("killed etcd member %s (leader), restarted after %s", m.Name, d), "", m.Restart()
	case faultRekeyLeaderKill:
		r, err := in.leader()
		if err != nil {
			return "", "", err
		}
		r.kill()
		d := hold(rng, 500, 3000)
		pace(context.Background(), d) // the fault lasts d; the load runs meanwhile
		return fmt.Sprintf("killed replica %d (leader), restarted after %s", r.index, d), "", in.rs.start(r)
	case faultRekeyLeaderPause:
		detail, err := in.pauseLeader(rng)
		return detail, "", err
	case faultEtcdPartition:
		m := in.etcd.Members[rng.Intn(len(in.etcd.Members))]
		leader := ""
		if l, err := in.etcd.Leader(ctx); err == nil && l == m {
			leader = " (leader)"
		}
		m.Partition()
		d := hold(rng, 3000, 5000)
		pace(context.Background(), d) // the fault lasts d; the load runs meanwhile
		m.Heal()
		return fmt.Sprintf("partitioned etcd member %s%s for %s", m.Name, leader, d), "", nil
	case faultEtcdDiskFull:
		m := in.etcd.Members[rng.Intn(len(in.etcd.Members))]
		if err := m.FillDisk(); err != nil {
			return "", "", err
		}
		d := hold(rng, 3000, 4000)
		pace(context.Background(), d) // the fault lasts d; the load runs meanwhile
		exited := !m.Running()
		effect := "etcd stayed up (no write needed new space)"
		if exited {
			effect = "etcd exited"
			if strings.Contains(m.LogTail(20000), "no space left on device") {
				effect = "etcd exited: no space left on device"
			}
		}
		if err := m.FreeDisk(); err != nil {
			return "", "", err
		}
		if !m.Running() {
			if err := m.Restart(); err != nil {
				return "", "", err
			}
		}
		return fmt.Sprintf("filled the disk of etcd member %s for %s (exited: %v)", m.Name, d, exited), effect, nil
	case faultRollingRestart:
		for _, r := range in.rs.replicas {
			if p := r.process(); !p.Stopped(30 * time.Second) {
				return "", "", fmt.Errorf("replica %d did not stop within 30s of SIGTERM", r.index)
			}
			if err := in.rs.start(r); err != nil {
				return "", "", err
			}
		}
		return "restarted every replica in turn (SIGTERM, start, ready)", "", nil
	}
	return "", "", fmt.Errorf("unknown fault %q", kind)
}

// pauseLeader stops the leader with SIGSTOP until another replica has
// taken the lease, and a moment longer, then continues it. Woken, it must
// not act as leader: its lease is gone, and it says so before anything
// else it does as leader.
func (in *injector) pauseLeader(rng *mathrand.Rand) (string, error) {
	r, err := in.leader()
	if err != nil {
		return "", err
	}
	if err := r.pause(); err != nil {
		return "", err
	}
	paused := time.Now()
	var next *replica
	err = framework.EventuallyErr(leaseDuration+30*time.Second, func(ctx context.Context) error {
		l, err := in.rs.leader(ctx)
		if err != nil {
			return err
		}
		if l == r {
			return errors.New("the paused replica still holds the lease")
		}
		next = l
		return nil
	})
	if err != nil {
		_ = r.resume()
		return "", fmt.Errorf("no other replica took over from paused replica %d: %w", r.index, err)
	}
	d := hold(rng, 500, 2500)
	pace(context.Background(), d) // the fault lasts d; the load runs meanwhile
	before := r.log()
	if err := r.resume(); err != nil {
		return "", err
	}
	// Woken, the old leader must stop by its own lease deadline, which
	// passed while it was stopped: before it has talked to etcd, so before
	// anything it does as leader can reach etcd (fencing). Learning it from
	// etcd ("Lost leadership: etcd lease expired") is too late: by then its
	// controllers have run with a lease another replica holds.
	err = framework.EventuallyErr(30*time.Second, func(context.Context) error {
		woken := strings.TrimPrefix(r.log(), before)
		deadline, etcdSaid := strings.Index(woken, "Lease deadline passed; stopping leader work"), strings.Index(woken, "Lost leadership")
		switch {
		case etcdSaid >= 0 && (deadline < 0 || etcdSaid < deadline):
			return framework.Permanent(fmt.Errorf("replica %d, woken past its lease, went on leading until etcd told it the lease was gone: it is not fenced by its own lease deadline", r.index))
		case deadline < 0:
			return fmt.Errorf("replica %d, woken, has not logged that its lease deadline passed", r.index)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	fenced := r.metric("rekey_leader_fenced_writes_total")
	return fmt.Sprintf("paused replica %d (leader) for %s; replica %d took over after %s; woken, it stopped at its lease deadline (fenced writes so far: %s)",
		r.index, time.Since(paused).Round(time.Millisecond), next.index, time.Since(paused).Round(time.Millisecond)-d, fenced), nil
}

// leader waits (bounded) until one running replica leads.
func (in *injector) leader() (*replica, error) {
	var r *replica
	err := framework.EventuallyErr(leaseDuration+30*time.Second, func(ctx context.Context) error {
		var err error
		r, err = in.rs.leader(ctx)
		return err
	})
	return r, err
}

// whole waits until every etcd member runs and agrees on a leader, and
// every replica is ready.
func (in *injector) whole() error {
	return framework.EventuallyErr(120*time.Second, func(ctx context.Context) error {
		for _, m := range in.etcd.Members {
			if !m.Running() {
				return fmt.Errorf("etcd member %s is not running:\n%s\n%s", m.Name, m.LogTail(3000), m.DiskUsage())
			}
		}
		if _, err := in.etcd.Leader(ctx); err != nil {
			return err
		}
		for _, r := range in.rs.replicas {
			if err := r.ready(ctx); err != nil {
				return err
			}
		}
		_, err := in.rs.leader(ctx)
		return err
	})
}
