package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
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

// Run renews a certificate that is not due as soon as its CA starts
// rotating: the watch on the CA wakes it, long before the next periodic
// look (an hour here) or the deadline.
func TestRunRenewsWhenTheIssuerRotates(t *testing.T) {
	f := &fakeSigner{t: t, ca: newCA(t)}
	m, client := newManager(t, f)
	objects := caObjects(rotationv1alpha1.PhaseNone, f.ca)
	for _, o := range objects {
		if err := client.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	m.CheckIssuer = func(ctx context.Context, c clientset.Interface, leaf *x509.Certificate) (bool, string, error) {
		return IssuerRotating(ctx, c, DefaultSigner, leaf)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Config{Managers: []*Manager{m}, IssuerCheckInterval: time.Hour}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	creates := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "create" && a.GetResource().Resource == "certificatesigningrequests" {
				n++
			}
		}
		return n
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eventually("no certificate bootstrapped", func() bool { return creates() == 1 })
	ca := objects[1].(*rotationv1alpha1.CertificateAuthority).DeepCopy()
	ca.Status.Phase = rotationv1alpha1.PhasePreparing
	if _, err := client.RotationV1alpha1().CertificateAuthorities().UpdateStatus(ctx, ca, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("not renewed when the CA started rotating", func() bool { return creates() >= 2 })
}
