package leaderelection

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The tests are package leaderelection_test: test/etcdtest reaches this
// package through the embedded etcd's key store, so an internal test that
// imported it would be an import cycle.

// WithBeforeKeepAlive returns cfg with the hook run before each keepalive.
func WithBeforeKeepAlive(cfg Config, hook func()) Config {
	cfg.beforeKeepAlive = hook
	return cfg
}

// Deadline is the lease deadline of the fence's current term (zero between
// terms).
func (f *Fence) Deadline() time.Time {
	if l := f.term.Load(); l != nil {
		return l.getDeadline()
	}
	return time.Time{}
}

// BeginUntil starts a term whose lease deadline is deadline.
func (f *Fence) BeginUntil(deadline time.Time) { f.begin(newLease(deadline)) }

// FencedWrites is rekey_leader_fenced_writes_total.
var FencedWrites = fencedWrites

// WithKeepAliveOnce returns cfg whose keepalives are sent by send instead
// of the client's KeepAliveOnce (to hold an attempt as an etcd member
// without a leader would).
func WithKeepAliveOnce(cfg Config, send func(context.Context, clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error)) Config {
	cfg.keepAliveOnce = send
	return cfg
}
