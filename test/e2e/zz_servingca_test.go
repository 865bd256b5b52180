package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

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
	var ca *rotationv1alpha1.CertificateAuthority
	first := func() *x509.Certificate {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := admin.RotationV1alpha1().CertificateAuthorities().Get(ctx, servingCA, metav1.GetOptions{})
			if err != nil || got.Status.Current == nil {
				return false, nil
			}
			ca = got
			return true, nil
		})
		if err != nil {
			t.Fatal("the serving CA was not created")
		}
		cert, err := authority.ParseCertificatePEM(ca.Status.Current.Certificate)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	oldCA := first()
	waitServedBy := func(c *x509.Certificate, what string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
			ok, err := servedIssuedBy(c)
			return err == nil && ok, nil
		})
		if err != nil {
			t.Fatalf("rekey does not serve a certificate of %s", what)
		}
	}
	waitServedBy(oldCA, "its serving CA")
	waitAvailable(t)

	// The client loop, through kube-apiserver's aggregator.
	var requests, failures atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
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

	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, servingCA, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var newCA *x509.Certificate
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := admin.RotationV1alpha1().CertificateAuthorities().Get(ctx, servingCA, metav1.GetOptions{})
		if err != nil || got.Status.Phase != rotationv1alpha1.PhasePrepared {
			return false, nil
		}
		newCA, err = authority.ParseCertificatePEM(got.Status.Current.Certificate)
		return err == nil, nil
	})
	if err != nil {
		t.Fatal("the serving CA did not reach Prepared")
	}
	waitServedBy(newCA, "the new serving CA")
	// rekey's own certificate was renewed, so nothing is pending.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := admin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, servingCA, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete}, metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal("Complete was not accepted once rekey renewed its certificate")
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := admin.RotationV1alpha1().CertificateAuthorities().Get(ctx, servingCA, metav1.GetOptions{})
		return err == nil && got.Status.Phase == rotationv1alpha1.PhaseCompleted, nil
	})
	if err != nil {
		t.Fatal("the serving CA did not complete")
	}
	// Keep the loop going a little after the old CA left every bundle.
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
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
		err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			out, _, err := framework.RunKubectl(t, cluster.AdminKubeconfig, nil, "get", "apiservice", name, "-o", `jsonpath={.status.conditions[?(@.type=="Available")].status}`)
			return err == nil && strings.TrimSpace(out) == "True", nil
		})
		if err != nil {
			t.Fatalf("APIService %s is not Available", name)
		}
	}
}
