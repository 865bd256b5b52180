package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/test/framework"
)

const servingCA = "rekey.io-serving"

// servedIssuedBy says whether rekey's port serves a certificate signed by ca.
func servedIssuedBy(ca *x509.Certificate) (bool, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", cluster.RekeyPort), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return false, err
	}
	defer func() { _ = conn.Close() }()
	leaf := conn.ConnectionState().PeerCertificates[0]
	return leaf.CheckSignatureFrom(ca) == nil, nil
}

// TestOwnServingCARotatesWithoutAFailedRequest restarts rekey with
// --serving-ca: rekey issues its serving certificate from its own CA and
// keeps the APIServices' caBundle. A client lists requests through the
// aggregator every 100 ms during a whole rotation of that CA: no request
// fails and the APIServices stay Available.
//
// It disturbs the shared cluster (rekey restarted twice, the APIServices
// on another CA meanwhile), and is safe wherever it falls in the run
// because of what it does, not of its file's name: it is not parallel, and
// the testing package runs a test that is not parallel alone (parallel
// tests wait until every other has finished, then run only with each
// other); it arranges its own server (the restart with --serving-ca) and
// waits for what it needs (its CA, rekey serving that CA's certificate,
// the APIServices Available); and its cleanup gives the next test the
// harness's server back. It must not call t.Parallel. A server of its own
// was not an option: the APIServices, which the test is about, are the
// cluster's, one per group.
func TestOwnServingCARotatesWithoutAFailedRequest(t *testing.T) {
	ctx := context.Background()
	if err := cluster.RestartRekey("--serving-ca=" + servingCA); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Back to the harness's serving certificate for the other tests.
		if err := cluster.RestartRekeyWithHarnessServing(); err != nil {
			t.Errorf("restarting rekey with the harness's serving certificate: %v", err)
		}
	})
	admin := cluster.RekeyAdmin
	var oldCA *x509.Certificate
	framework.Eventually(t, 60*time.Second, "the serving CA created", func(ctx context.Context) error {
		got, err := admin.RotationV1alpha1().CertificateAuthorities().Get(ctx, servingCA, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Status.Current == nil {
			return fmt.Errorf("no current key: %+v", got.Status.Conditions)
		}
		oldCA, err = authority.ParseCertificatePEM(got.Status.Current.Certificate)
		return framework.Permanent(err)
	})
	waitServedBy := func(c *x509.Certificate, what string) {
		t.Helper()
		framework.Eventually(t, 90*time.Second, "rekey serving a certificate of "+what, func(context.Context) error {
			ok, err := servedIssuedBy(c)
			if err == nil && !ok {
				err = errors.New("it serves another CA's")
			}
			return err
		})
	}
	waitServedBy(oldCA, "its serving CA")
	waitAvailable(t)

	// The client loop, through kube-apiserver's aggregator.
	var requests, failures atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stopOnce sync.Once
	stopLoop := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	defer stopLoop() // also when the test fails half-way
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := admin.CertificatesV1alpha1().CertificateSigningRequests().List(reqCtx, metav1.ListOptions{Limit: 1})
			cancel()
			requests.Add(1)
			if err != nil {
				failures.Add(1)
				firstFailure.CompareAndSwap(nil, err.Error())
			}
		}
	}()

	// The new CA waits only for rekey's own publication (the APIServices'
	// caBundle), not for trustPropagation on top.
	if err := framework.SetImmediateRotation(ctx, admin, servingCA); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, servingCA, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newCA, err := authority.ParseCertificatePEM(waitCAPhase(t, servingCA, rotationv1alpha1.PhasePrepared).Status.Current.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	waitServedBy(newCA, "the new serving CA")
	// rekey's own certificate was renewed, so nothing is pending.
	framework.Eventually(t, 60*time.Second, "Complete accepted once rekey renewed its certificate", func(ctx context.Context) error {
		_, err := admin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, servingCA, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete}, metav1.CreateOptions{})
		return err
	})
	waitCAPhase(t, servingCA, rotationv1alpha1.PhaseCompleted)
	// The loop goes on until the old CA has left every APIService's
	// caBundle, and then for twenty more requests, which must succeed too.
	framework.Eventually(t, 60*time.Second, "every APIService trusting the new serving CA, not the old", func(context.Context) error {
		return apiServicesTrust(t, newCA, oldCA)
	})
	after := requests.Load()
	framework.Eventually(t, 60*time.Second, "twenty requests after the old CA left the caBundles", func(context.Context) error {
		if f := failures.Load(); f != 0 {
			return framework.Permanent(fmt.Errorf("%d requests failed; first: %v", f, firstFailure.Load()))
		}
		if n := requests.Load() - after; n < 20 {
			return fmt.Errorf("%d so far", n)
		}
		return nil
	})
	stopLoop()
	if requests.Load() < 20 {
		t.Fatalf("only %d requests were made", requests.Load())
	}
	if f := failures.Load(); f != 0 {
		t.Fatalf("%d of %d requests failed during the rotation; first: %v", f, requests.Load(), firstFailure.Load())
	}
	waitAvailable(t)
	t.Logf("%d requests through the aggregator during the rotation, none failed", requests.Load())
}

func waitAvailable(t *testing.T) {
	t.Helper()
	for _, name := range framework.APIServiceNames {
		framework.Eventually(t, 60*time.Second, "APIService "+name+" Available", func(context.Context) error {
			out, errOut, err := framework.RunKubectl(t, cluster.AdminKubeconfig, nil, "get", "apiservice", name, "-o", `jsonpath={.status.conditions[?(@.type=="Available")].status}`)
			if err != nil {
				return fmt.Errorf("%w: %s", err, errOut)
			}
			if got := strings.TrimSpace(out); got != "True" {
				return fmt.Errorf("Available %q", got)
			}
			return nil
		})
	}
}

// apiServicesTrust says why not every APIService's caBundle holds ca and
// not gone.
func apiServicesTrust(t *testing.T, ca, gone *x509.Certificate) error {
	for _, name := range framework.APIServiceNames {
		out, errOut, err := framework.RunKubectl(t, cluster.AdminKubeconfig, nil, "get", "apiservice", name, "-o", "jsonpath={.spec.caBundle}")
		if err != nil {
			return fmt.Errorf("%w: %s", err, errOut)
		}
		bundle, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out))
		if err != nil {
			return fmt.Errorf("APIService %s: caBundle: %w", name, err)
		}
		certs, err := validation.ParseCertificateChain(bundle)
		if err != nil {
			return fmt.Errorf("APIService %s: caBundle: %w", name, err)
		}
		if !slices.ContainsFunc(certs, ca.Equal) || slices.ContainsFunc(certs, gone.Equal) {
			return fmt.Errorf("APIService %s: the caBundle's %d certificate(s) hold the new CA %t, the old %t",
				name, len(certs), slices.ContainsFunc(certs, ca.Equal), slices.ContainsFunc(certs, gone.Equal))
		}
	}
	return nil
}
