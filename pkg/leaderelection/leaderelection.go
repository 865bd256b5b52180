// Package leaderelection runs work on one replica at a time, elected through
// etcd: the leader holds an etcd lease; if it dies the lease expires after
// its TTL and another replica takes over.
//
// The leader keeps its lease alive itself (KeepAliveOnce every TTL/3) and
// keeps a local deadline from it: the monotonic time the last successful
// keepalive was sent plus the TTL etcd granted. etcd cannot expire the
// lease before that deadline; after it, another replica may lead. So the
// work is stopped when the deadline passes, and the Fence says not leading
// from that instant, before any goroutine of a process that was stopped
// past its lease has run again: a keepalive stream would only learn that
// the lease is gone once it can talk to etcd again.
//
// That covers stops of the process or its container while the machine's
// clock runs on (SIGSTOP, the cgroup freezer, a long GC, CPU throttling).
// It does not cover a guest whose monotonic clock stops with it (a paused
// VM, a suspended host): on resume its deadline has not passed, and it
// leads until its next keepalive is refused. What protects the new
// leader's writes then is only their own compare-and-swap and
// resourceVersion preconditions.
package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"k8s.io/klog/v2"
)

// Config describes an election.
type Config struct {
	Client   *clientv3.Client
	Key      string
	Identity string
	// LeaseDuration is the etcd lease TTL: how long a dead leader blocks
	// the others.
	LeaseDuration time.Duration
	// Run is called when this replica becomes leader, with a context that
	// is cancelled when leadership is lost (the lease deadline passed or
	// the lease is gone) and that carries the Fence (FromContext). It
	// should return when it is; if it returns an error before, leadership
	// is given up so that another replica may try, and this one campaigns
	// again a second later.
	Run func(ctx context.Context) error
	// Fence, when set, is the fence this election keeps: it leads exactly
	// while a term runs and its lease deadline has not passed. The
	// clients of the leader's work check it (Fence.WrapTransport). Nil: a
	// fence of Run's own, still passed to the work in its context.
	Fence *Fence

	// beforeKeepAlive, in tests, runs before each keepalive is sent:
	// blocking in it is a process stopped past its lease, as far as the
	// lease is concerned.
	beforeKeepAlive func()
	// keepAliveOnce, in tests, sends each keepalive instead of
	// Client.KeepAliveOnce.
	keepAliveOnce func(context.Context, clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error)
}

// Run campaigns until ctx is done, calling cfg.Run each time this replica
// wins. A lost lease cancels the work and campaigns again.
func Run(ctx context.Context, cfg Config) {
	logger := klog.FromContext(ctx).WithValues("election", cfg.Key, "identity", cfg.Identity)
	if cfg.Fence == nil {
		cfg.Fence = NewFence()
	}
	for ctx.Err() == nil {
		if err := campaignOnce(klog.NewContext(ctx, logger), cfg); err != nil && ctx.Err() == nil {
			logger.Error(err, "Leader election failed; retrying")
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// errLeaseLost: the lease lapsed (its deadline passed or etcd no longer
// has it) before the term began.
var errLeaseLost = errors.New("the etcd lease lapsed while campaigning")

func campaignOnce(ctx context.Context, cfg Config) error {
	logger := klog.FromContext(ctx)
	ttl := int64(cfg.LeaseDuration.Seconds())
	if ttl < 1 {
		ttl = 1
	}
	// The lease, its keepalives and the campaign end with this attempt.
	sessionCtx, stopSession := context.WithCancel(ctx)
	defer stopSession()
	sent := time.Now()
	grant, err := cfg.Client.Grant(sessionCtx, ttl)
	if err != nil {
		return fmt.Errorf("granting an etcd lease: %w", err)
	}
	l := newLease(sent.Add(time.Duration(grant.TTL) * time.Second))
	defer func() {
		// Revoking deletes this replica's election key at once, so the
		// next leader need not wait for the TTL; if it fails the lease
		// expires on its own.
		revokeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = cfg.Client.Revoke(revokeCtx, grant.ID)
	}()
	// The election needs a session; its own keepalive is stopped at once
	// (Orphan does not revoke) so that the lease lives only as long as the
	// keepalives this deadline is computed from.
	session, err := concurrency.NewSession(cfg.Client, concurrency.WithLease(grant.ID), concurrency.WithContext(sessionCtx))
	if err != nil {
		return fmt.Errorf("creating etcd session: %w", err)
	}
	session.Orphan()
	go keepAlive(sessionCtx, cfg, grant.ID, time.Duration(grant.TTL)*time.Second, l)
	go watchDeadline(sessionCtx, l)

	election := concurrency.NewElection(session, cfg.Key)
	logger.Info("Campaigning for leadership")
	campaignCtx, stopCampaign := context.WithCancel(sessionCtx)
	go func() {
		select {
		case <-l.lost:
			stopCampaign()
		case <-campaignCtx.Done():
		}
	}()
	err = election.Campaign(campaignCtx, cfg.Identity)
	stopCampaign()
	select {
	case <-l.lost:
		return errLeaseLost
	default:
	}
	if err != nil {
		return fmt.Errorf("campaigning: %w", err)
	}
	cfg.Fence.begin(l)
	defer cfg.Fence.end(l)
	if !l.live(time.Now()) {
		return errLeaseLost
	}
	logger.Info("Became leader", "leaseTTL", time.Duration(grant.TTL)*time.Second)
	workCtx, cancel := context.WithCancel(WithFence(ctx, cfg.Fence))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cfg.Run(workCtx) }()
	var workErr error
	select {
	case <-l.lost:
		// watchDeadline or keepAlive logged why.
		cancel()
		if err := <-done; err != nil {
			logger.Error(err, "Work ended with an error after leadership was lost")
		}
	case <-ctx.Done():
		cancel()
		if err := <-done; err != nil {
			logger.Error(err, "Work ended with an error while stopping")
		}
	case workErr = <-done:
		cancel()
		if workErr != nil {
			logger.Error(workErr, "Work stopped while leader; giving up leadership")
		} else {
			// Work that returns while it leads has nothing left to do this
			// term; no failure to report.
			logger.Info("Work stopped while leader; giving up leadership")
		}
	}
	cfg.Fence.end(l)
	resignCtx, resignCancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer resignCancel()
	_ = election.Resign(resignCtx)
	if workErr != nil {
		return fmt.Errorf("leader work: %w", workErr)
	}
	return nil
}

// attemptFloor is the shortest time a keepalive attempt is given (a round
// trip to etcd under load), whatever the lease duration.
const attemptFloor = 300 * time.Millisecond

// keepAlive renews the lease every TTL/3, each success moving the deadline
// to the time that keepalive was sent plus the TTL granted (the lease
// cannot expire in etcd sooner: etcd restarts its TTL when the keepalive
// arrives, which is later). A lease etcd no longer has is lost at once;
// other errors are retried until the deadline.
//
// Each attempt requires a leader and is bounded by half the interval (at
// least attemptFloor, never past the deadline). An etcd member cut off
// from its peers holds a keepalive for its request timeout (7 s by
// default) while it waits for a leader, longer than what is left of a
// short lease: one unbounded attempt there would lose a lease that the
// healthy members still hold. With a leader required, a member that knows
// it has none refuses at once (Unavailable, which KeepAliveOnce retries
// on a new stream); the timeout bounds one that has not noticed yet. The
// client's round robin sends the next stream to another member.
func keepAlive(ctx context.Context, cfg Config, id clientv3.LeaseID, ttl time.Duration, l *lease) {
	logger := klog.FromContext(ctx)
	send := cfg.Client.KeepAliveOnce
	if cfg.keepAliveOnce != nil {
		send = cfg.keepAliveOnce
	}
	interval := max(ttl/3, 100*time.Millisecond)
	attemptTimeout := max(interval/2, attemptFloor)
	// A refused attempt is retried soon, but not in a tight loop.
	retryWait := min(interval/4, 250*time.Millisecond)
	wait := interval
	for {
		if !l.wait(ctx, wait) {
			return
		}
		if cfg.beforeKeepAlive != nil {
			cfg.beforeKeepAlive()
		}
		deadline := l.getDeadline()
		if !time.Now().Before(deadline) {
			// Checked on every round, not only by the timer.
			loseLease(ctx, l, deadline)
			return
		}
		sent := time.Now()
		// Waiting past the deadline would not help: the term is over then.
		attemptDeadline := sent.Add(attemptTimeout)
		if attemptDeadline.After(deadline) {
			attemptDeadline = deadline
		}
		kctx, cancel := context.WithDeadline(clientv3.WithRequireLeader(ctx), attemptDeadline)
		resp, err := send(kctx, id)
		cancel()
		switch {
		case err == nil:
			l.extend(sent.Add(time.Duration(resp.TTL) * time.Second))
			wait = interval
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			logger.Info("Lost leadership: etcd lease expired")
			l.lose()
			return
		case ctx.Err() != nil:
			return
		default:
			logger.V(2).Info("Lease keepalive failed; retrying until the lease deadline", "err", err, "deadline", deadline.Round(0), "attemptTimeout", attemptTimeout)
			wait = retryWait
		}
	}
}

// watchDeadline loses the lease when its deadline passes: a timer, re-armed
// for each deadline the keepalives set.
func watchDeadline(ctx context.Context, l *lease) {
	for {
		deadline := l.getDeadline()
		d := time.Until(deadline)
		if d <= 0 {
			loseLease(ctx, l, deadline)
			return
		}
		if !l.wait(ctx, d) {
			return
		}
	}
}

func loseLease(ctx context.Context, l *lease, deadline time.Time) {
	select {
	case <-l.lost:
		return
	default:
	}
	logger := klog.FromContext(ctx)
	if l.leading.Load() {
		logger.Info("Lease deadline passed; stopping leader work", "deadline", deadline.Round(0), "late", time.Since(deadline).Round(time.Millisecond))
	} else {
		logger.Info("Lease deadline passed while campaigning; campaigning again with a new lease", "deadline", deadline.Round(0))
	}
	l.lose()
}
