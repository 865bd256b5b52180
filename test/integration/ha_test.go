package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

const leaseDuration = 3 * time.Second

// TestOnlyTheLeaderSignsAndAKilledLeaderHandsOver runs two replicas on one
// etcd: one runs the controllers; killing it hands the controllers' work to
// the other within the lease time, and no request is signed twice. With
// synchronous issuance (the default) every replica signs in the approval
// write, so signing does not even wait for the new leader; without it,
// signing is the leader's alone and resumes once the lease has passed.
//
// Not parallel: with a 3 s lease, a leader starved of CPU by tests beside
// it could miss a renewal and hand over while it lives, which the test
// rightly counts as a failure.
func TestOnlyTheLeaderSignsAndAKilledLeaderHandsOver(t *testing.T) {
	for _, synchronous := range []bool{true, false} {
		t.Run(fmt.Sprintf("synchronous-issuance=%v", synchronous), func(t *testing.T) {
			testLeaderHandover(t, synchronous)
		})
	}
}

func testLeaderHandover(t *testing.T, synchronous bool) {
	etcdURL, etcd := framework.StartEtcd(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	args := []string{"--etcd-servers=" + etcdURL, "--leader-elect-lease-duration=" + leaseDuration.String(),
		fmt.Sprintf("--synchronous-issuance=%v", synchronous)}
	a := framework.StartStandalone(t, dirA, args...)
	// The replicas share the PKI and key-encryption key, as replicas of a
	// Deployment share their Secrets.
	if out, err := exec.Command("cp", "-a", filepath.Join(dirA, "pki"), filepath.Join(dirB, "pki")).CombinedOutput(); err != nil {
		t.Fatalf("copying PKI: %v %s", err, out)
	}
	b := framework.StartStandalone(t, dirB, args...)

	leader, follower := waitForLeader(t, a, b)
	if synchronous {
		waitUntilIssuedInTheWrite(t, follower.Client, "rekey.io/kube-apiserver-client", certv1alpha1.UsageClientAuth)
	} else {
		caOf(t, follower.Client, "rekey.io-kube-apiserver-client")
	}
	if got := signBatch(t, follower.Client, "before", 10); synchronous && got != 10 {
		t.Fatalf("the follower signed %d of 10 approvals in the approval write, want all", got)
	}
	if n := strings.Count(follower.Log(), "Became leader"); n != 0 {
		t.Fatalf("the follower became leader %d times while the leader lived", n)
	}

	leader.Kill()
	killedAt := time.Now()
	inResponse := signBatch(t, follower.Client, "after", 10)
	took := time.Since(killedAt)
	if synchronous && inResponse != 10 {
		t.Fatalf("after the leader died, %d of 10 approvals carried their certificate", inResponse)
	}
	framework.Eventually(t, leaseDuration+20*time.Second, "the surviving replica becomes leader", func(context.Context) error {
		if !strings.Contains(follower.Log(), "Became leader") {
			return errors.New("its log does not say so")
		}
		return nil
	})
	// The lease expires after leaseDuration; signing must resume soon after.
	if took > leaseDuration+20*time.Second {
		t.Fatalf("work resumed %s after the leader died, lease is %s", took, leaseDuration)
	}
	t.Logf("10 requests signed %s after the leader was killed (lease %s), %d in the approval response", took.Round(time.Millisecond), leaseDuration, inResponse)

	// Every request was signed exactly once.
	records, err := etcd.Get(context.Background(), "/rekey.io-private/issued/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	perCSR := map[string]int{}
	for _, kv := range records.Kvs {
		var rec struct {
			CSRName string `json:"csrName"`
		}
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			t.Fatal(err)
		}
		perCSR[rec.CSRName]++
	}
	for _, prefix := range []string{"before", "after"} {
		for i := 0; i < 10; i++ {
			name := fmt.Sprintf("ha-%s-%d", prefix, i)
			if perCSR[name] != 1 {
				t.Errorf("%s was signed %d times", name, perCSR[name])
			}
		}
	}
}

func waitForLeader(t *testing.T, a, b *framework.Standalone) (leader, follower *framework.Standalone) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, "a single leader", func(context.Context) error {
		la, lb := strings.Contains(a.Log(), "Became leader"), strings.Contains(b.Log(), "Became leader")
		switch {
		case la && lb:
			return framework.Permanent(errors.New("both replicas became leader"))
		case la:
			leader, follower = a, b
		case lb:
			leader, follower = b, a
		default:
			return errors.New("no leader yet")
		}
		return nil
	})
	return leader, follower
}

// signBatch creates and approves n requests and waits for their
// certificates; it returns how many approval responses carried theirs.
func signBatch(t *testing.T, client clientset.Interface, prefix string, n int) (inResponse int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if issued(createAndApprove(t, client, requestFor(t, fmt.Sprintf("ha-%s-%d", prefix, i), "rekey.io/kube-apiserver-client",
			fixtures.CSROptions{CommonName: "ha"}, certv1alpha1.UsageClientAuth))) {
			inResponse++
		}
	}
	for i := 0; i < n; i++ {
		waitForCertificate(t, client, fmt.Sprintf("ha-%s-%d", prefix, i))
	}
	return inResponse
}
