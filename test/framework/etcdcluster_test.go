package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestEtcdCluster runs a real three-member cluster through every fault the
// framework offers: TLS client auth, a killed leader, a partitioned
// leader, a full disk.
func TestEtcdCluster(t *testing.T) {
	c := StartEtcdCluster(t, EtcdClusterOptions{DiskBytes: 256 << 20})
	client := c.Client(t)
	put := func(ctx context.Context, cl *clientv3.Client, key, value string) error {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := cl.Put(ctx, key, value)
		return err
	}
	get := func(ctx context.Context, cl *clientv3.Client, key string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		resp, err := cl.Get(ctx, key)
		if err != nil {
			return "", err
		}
		if len(resp.Kvs) != 1 {
			return "", fmt.Errorf("%s: %d values", key, len(resp.Kvs))
		}
		return string(resp.Kvs[0].Value), nil
	}
	// wantValue waits until a linearizable read of key through cl sees
	// value.
	wantValue := func(t *testing.T, what string, cl *clientv3.Client, key, value string) {
		t.Helper()
		Eventually(t, 30*time.Second, what, func(ctx context.Context) error {
			got, err := get(ctx, cl, key)
			if err == nil && got != value {
				err = fmt.Errorf("%s = %q, want %q", key, got, value)
			}
			return err
		})
	}
	leader := func(t *testing.T, what string, not *EtcdMember) *EtcdMember {
		t.Helper()
		var l *EtcdMember
		Eventually(t, 30*time.Second, what, func(ctx context.Context) error {
			var err error
			if l, err = c.Leader(ctx); err == nil && l == not {
				err = fmt.Errorf("the leader is still %s", l.Name)
			}
			return err
		})
		return l
	}
	healthy := func(t *testing.T, m *EtcdMember) {
		t.Helper()
		Eventually(t, 30*time.Second, m.Name+" healthy", func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			if err := m.Healthy(ctx); err != nil {
				return fmt.Errorf("%w\n%s", err, m.LogTail(1500))
			}
			return nil
		})
	}
	// others is a client of every member but m.
	others := func(t *testing.T, m *EtcdMember) *clientv3.Client {
		var eps []string
		for _, o := range c.Members {
			if o != m {
				eps = append(eps, o.ClientURL)
			}
		}
		cl, err := c.newClient(eps)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}

	if err := put(context.Background(), client, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	wantValue(t, "reading through TLS", client, "k", "v1")
	if got := c.RekeyArgs(); len(got) != 4 || !strings.HasPrefix(got[0], "--etcd-servers=https://127.0.0.1:") || strings.Count(got[0], ",") != 2 {
		t.Fatalf("RekeyArgs() = %v", got)
	}

	t.Run("a client without a certificate is refused", func(t *testing.T) {
		caPEM, err := os.ReadFile(c.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(caPEM)
		anon, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), TLS: &tls.Config{RootCAs: roots}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = anon.Close() }()
		if _, err := get(context.Background(), anon, "k"); err == nil {
			t.Fatal("a client without a certificate read k")
		}
	})

	t.Run("killed leader", func(t *testing.T) {
		old := leader(t, "a leader", nil)
		old.Kill()
		if old.Running() {
			t.Fatal("Kill returned before the process ended")
		}
		l := leader(t, "a new leader", old)
		t.Logf("%s killed, %s leads", old.Name, l.Name)
		wantPut(t, "a write without the killed leader", func(ctx context.Context) error { return put(ctx, client, "k", "v2") })
		if err := old.Restart(); err != nil {
			t.Fatal(err)
		}
		healthy(t, old)
		wantValue(t, "the restarted member reads the write it missed", c.MemberClient(t, old.Index), "k", "v2")
	})

	t.Run("partitioned leader", func(t *testing.T) {
		cut := leader(t, "a leader", nil)
		cut.Partition()
		l := leader(t, "a leader of the majority", cut)
		t.Logf("%s partitioned, %s leads", cut.Name, l.Name)
		majority := others(t, cut)
		wantPut(t, "a write through the majority", func(ctx context.Context) error { return put(ctx, majority, "k", "v3") })
		alone := c.MemberClient(t, cut.Index)
		if got, err := get(context.Background(), alone, "k"); err == nil {
			t.Fatalf("a linearizable read through the partitioned %s answered %q", cut.Name, got)
		}
		cut.Heal()
		healthy(t, cut)
		wantValue(t, "the healed member reads the write it missed", alone, "k", "v3")
	})

	t.Run("full disk", func(t *testing.T) {
		if os.Geteuid() != 0 {
			if err := c.Members[0].FillDisk(); err == nil || !strings.Contains(err.Error(), "root") {
				t.Fatalf("FillDisk without root: %v, want an error saying it needs root", err)
			}
			t.Skip("a full disk is a tmpfs mounted by root")
		}
		l := leader(t, "a leader", nil)
		full := c.Members[(l.Index+1)%len(c.Members)]
		if err := full.FillDisk(); err != nil {
			t.Fatal(err)
		}
		majority := others(t, full)
		value := strings.Repeat("x", 4<<10)
		n := 0
		Eventually(t, 60*time.Second, full.Name+" stops on a full disk", func(ctx context.Context) error {
			// The writes go through the others: the full member is
			// not what must answer them.
			for range 64 {
				if err := put(ctx, majority, fmt.Sprintf("filler/%d", n%64), value); err != nil {
					return err
				}
				n++
			}
			if !full.Running() {
				return nil
			}
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if err := full.Healthy(ctx); err != nil {
				return nil
			}
			return errors.New("still running and healthy")
		})
		// etcd fails the bbolt commit that needs a new page with ENOSPC and
		// exits (zap's Fatal: status 1); its WAL, preallocated in 64 MiB
		// segments, fails only when it needs a new segment.
		t.Logf("after %d writes of %d KiB: %s running=%v exit status %d, log ends:\n%s",
			n, len(value)>>10, full.Name, full.Running(), full.process().ExitCode(), full.LogTail(600))
		if err := full.FreeDisk(); err != nil {
			t.Fatal(err)
		}
		full.Kill()
		if err := full.Restart(); err != nil {
			t.Fatal(err)
		}
		healthy(t, full)
		wantValue(t, "the member reads after its disk was freed", c.MemberClient(t, full.Index), "filler/0", value)
	})
}

// wantPut waits until write succeeds (a leader may take an election to
// settle).
func wantPut(t *testing.T, what string, write func(ctx context.Context) error) {
	t.Helper()
	Eventually(t, 30*time.Second, what, func(ctx context.Context) error { return write(ctx) })
}
