package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

const leaseDuration = 3 * time.Second

// TestOnlyTheLeaderSignsAndAKilledLeaderHandsOver runs two replicas on one
// etcd: one runs the controllers; killing it hands the work to the other
// within the lease time, and no request is signed twice.
func TestOnlyTheLeaderSignsAndAKilledLeaderHandsOver(t *testing.T) {
	etcdURL, etcd := framework.StartEtcd(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	args := []string{"--etcd-servers=" + etcdURL, "--leader-elect-lease-duration=" + leaseDuration.String()}
	a := framework.StartStandalone(t, dirA, args...)
	// The replicas share the PKI and key-encryption key, as replicas of a
	// Deployment share their Secrets.
	if out, err := exec.Command("cp", "-a", filepath.Join(dirA, "pki"), filepath.Join(dirB, "pki")).CombinedOutput(); err != nil {
		t.Fatalf("copying PKI: %v %s", err, out)
	}
	b := framework.StartStandalone(t, dirB, args...)

	leader, follower := waitForLeader(t, a, b)
	signBatch(t, follower.Client, "before", 10)
	if n := strings.Count(follower.Log(), "Became leader"); n != 0 {
		t.Fatalf("the follower became leader %d times while the leader lived", n)
	}

	leader.Kill()
	killedAt := time.Now()
	signBatch(t, follower.Client, "after", 10)
	took := time.Since(killedAt)
	if !strings.Contains(follower.Log(), "Became leader") {
		t.Fatal("the surviving replica never became leader")
	}
	// The lease expires after leaseDuration; signing must resume soon after.
	if took > leaseDuration+20*time.Second {
		t.Fatalf("work resumed %s after the leader died, lease is %s", took, leaseDuration)
	}
	t.Logf("signing resumed %s after the leader was killed (lease %s)", took.Round(time.Millisecond), leaseDuration)

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
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		la, lb := strings.Contains(a.Log(), "Became leader"), strings.Contains(b.Log(), "Became leader")
		if la && lb {
			return false, fmt.Errorf("both replicas became leader")
		}
		switch {
		case la:
			leader, follower = a, b
		case lb:
			leader, follower = b, a
		}
		return leader != nil, nil
	})
	if err != nil {
		t.Fatalf("no single leader: %v", err)
	}
	return leader, follower
}

func signBatch(t *testing.T, client clientset.Interface, prefix string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		createAndApprove(t, client, requestFor(t, fmt.Sprintf("ha-%s-%d", prefix, i), "rekey.io/kube-apiserver-client",
			fixtures.CSROptions{CommonName: "ha"}, certv1alpha1.UsageClientAuth))
	}
	for i := 0; i < n; i++ {
		waitForCertificate(t, client, fmt.Sprintf("ha-%s-%d", prefix, i))
	}
}
