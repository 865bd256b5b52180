package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

// Without a client certificate nothing else is asked for: the serving
// certificate is requested as the node.
func TestRenewStopsWhenTheClientCertificateFails(t *testing.T) {
	dir := t.TempDir()
	asked := 0
	failing := func(*tls.Certificate) (clientset.Interface, error) {
		asked++
		return nil, errors.New("server down")
	}
	managers := []*Manager{
		{Store: &Store{Dir: dir, Prefix: PrefixClient}, Template: ClientTemplate(DefaultSigner, "n"), NewClient: failing},
		{Store: &Store{Dir: dir, Prefix: PrefixServer}, Template: ServingTemplate("rekey.io/kubelet-serving", "n", []string{"n"}, nil), NewClient: failing},
	}
	_, err := renew(context.Background(), Config{Managers: managers})
	if err == nil || !strings.Contains(err.Error(), "rekey-client") || asked != 1 {
		t.Fatalf("err %v after %d attempts, want the client's failure only", err, asked)
	}
}

// Failed attempts are retried after 1s, 2s, 4s, ... up to 5m, each
// jittered to [0.5, 1.5) times itself.
func TestRetryBackoff(t *testing.T) {
	for range 50 {
		b := retryBackoff()
		base := time.Second
		for step := range 14 {
			got := b.Step()
			if got < base/2 || got >= base*3/2 {
				t.Fatalf("step %d: %s, want [%s, %s)", step, got, base/2, base*3/2)
			}
			base = min(2*base, 5*time.Minute)
		}
	}
}
