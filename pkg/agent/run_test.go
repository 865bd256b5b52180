package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"

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

// Run does not renew while the CA is Preparing (the old key still signs),
// and from Prepared renews at the point drawn inside the renewal window:
// not before it, and long before the next periodic look (an hour here)
// or the deadline, since the loop wakes for it.
func TestRunRenewsAtTheDrawnPointAfterPrepared(t *testing.T) {
	oldCA, freshCA := newCA(t), newCA(t)
	f := &fakeSigner{t: t, ca: oldCA}
	m, client := newManager(t, f)
	objects := caObjects(rotationv1alpha1.PhaseNone, oldCA, oldCA)
	for _, o := range objects {
		if err := client.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var created []time.Time
	client.PrependReactor("create", "certificatesigningrequests", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		created = append(created, time.Now())
		return false, nil, nil
	})
	creates := func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(created)
	}
	m.CheckIssuer = func(ctx context.Context, c clientset.Interface, leaf *x509.Certificate) (*EarlyRenewal, error) {
		r, _, err := IssuerRotating(ctx, c, DefaultSigner, leaf)
		return r, err
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
	eventually := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	caGets := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "certificateauthorities" {
				n++
			}
		}
		return n
	}
	eventually("no certificate bootstrapped", func() bool { return len(creates()) == 1 })
	// The watch's get, and the loop's look when the watch started.
	eventually("the CA not looked at after the bootstrap", func() bool { return caGets() >= 2 })
	before := caGets()
	cas := client.RotationV1alpha1().CertificateAuthorities()
	ca := objects[1].(*rotationv1alpha1.CertificateAuthority).DeepCopy()
	ca.Status.Phase = rotationv1alpha1.PhasePreparing
	ca.Status.TrustBundle = string(oldCA.CertPEM()) + string(freshCA.CertPEM())
	if ca, err := cas.UpdateStatus(ctx, ca, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	} else {
		// The watch wakes the loop, which looks at the CA in Preparing.
		eventually("the loop did not look at the CA in Preparing", func() bool { return caGets() > before })
		if n := len(creates()); n != 1 {
			t.Fatalf("%d requests in Preparing, want none after the bootstrap", n)
		}
		pair, err := m.Store.Current()
		if err != nil {
			t.Fatal(err)
		}
		// Prepared now, with a window of 3s: the point is drawn from the
		// certificate.
		window := 3 * time.Second
		preparedAt := time.Now()
		point := RenewalPoint(pair.Leaf, preparedAt, window)
		f.setCA(freshCA)
		ca.Status.Phase = rotationv1alpha1.PhasePrepared
		ca.Status.Current = &rotationv1alpha1.CACertificate{Certificate: string(freshCA.CertPEM())}
		ca.Status.TrustBundle = string(freshCA.CertPEM()) + string(oldCA.CertPEM())
		ca.Status.LastInitiationFinishedTime = &metav1.Time{Time: preparedAt}
		ca.Spec.Rotation = &rotationv1alpha1.RotationPolicy{RenewalWindow: &metav1.Duration{Duration: window}}
		if _, err := cas.Update(ctx, ca, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually("not renewed after Prepared", func() bool { return len(creates()) >= 2 })
		// metav1.Time keeps seconds only in the server; the fake keeps
		// the nanoseconds, so the point is the agent's exactly.
		if at := creates()[1]; at.Before(point) {
			t.Fatalf("renewed at %s, before the drawn point %s", at.Format(time.RFC3339Nano), point.Format(time.RFC3339Nano))
		}
	}
}
