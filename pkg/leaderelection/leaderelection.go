// Package leaderelection runs work on one replica at a time, elected through
// etcd: the leader holds an etcd lease; if it dies the lease expires after
// its TTL and another replica takes over.
package leaderelection

import (
	"context"
	"fmt"
	"time"

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
	// is cancelled when leadership is lost. It should return when it is; if
	// it returns an error before, leadership is given up so that another
	// replica may try, and this one campaigns again a second later.
	Run func(ctx context.Context) error
}

// Run campaigns until ctx is done, calling cfg.Run each time this replica
// wins. A lost lease cancels the work and campaigns again.
func Run(ctx context.Context, cfg Config) {
	logger := klog.FromContext(ctx).WithValues("election", cfg.Key, "identity", cfg.Identity)
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

func campaignOnce(ctx context.Context, cfg Config) error {
	logger := klog.FromContext(ctx)
	ttl := int(cfg.LeaseDuration.Seconds())
	if ttl < 1 {
		ttl = 1
	}
	session, err := concurrency.NewSession(cfg.Client, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("creating etcd session: %w", err)
	}
	defer func() { _ = session.Close() }() // the lease expires on its own if this fails
	election := concurrency.NewElection(session, cfg.Key)
	logger.Info("Campaigning for leadership")
	if err := election.Campaign(ctx, cfg.Identity); err != nil {
		return fmt.Errorf("campaigning: %w", err)
	}
	logger.Info("Became leader")
	workCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cfg.Run(workCtx) }()
	var workErr error
	select {
	case <-session.Done():
		logger.Info("Lost leadership: etcd lease expired")
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
		logger.Error(workErr, "Work stopped while leader; giving up leadership")
	}
	resignCtx, resignCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer resignCancel()
	_ = election.Resign(resignCtx)
	if workErr != nil {
		return fmt.Errorf("leader work: %w", workErr)
	}
	return nil
}
