package integration

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/generated/clientset/versioned/scheme"
	"rekey.io/rekey/test/framework"
)

// createSelfNodeClientOnce is CreateSelfNodeClient without client-go's own
// retries of a 429 (it would wait out the Retry-After and try again), so
// that the test sees the refusal and its Retry-After header.
func createSelfNodeClientOnce(ctx context.Context, client clientset.Interface, csr *certv1alpha1.CertificateSigningRequest) (*certv1alpha1.CertificateSigningRequest, string, error) {
	out := &certv1alpha1.CertificateSigningRequest{}
	res := client.CertificatesV1alpha1().RESTClient().Post().Resource("certificatesigningrequests").Name(csr.Name).SubResource("selfnodeclient").
		VersionedParams(&metav1.CreateOptions{}, scheme.ParameterCodec).Body(csr).MaxRetries(0).Do(ctx)
	err := res.Into(out)
	retryAfter := ""
	if err != nil {
		if secs, ok := apierrors.SuggestsClientDelay(err); ok {
			retryAfter = strconv.Itoa(secs)
		}
	}
	return out, retryAfter, err
}

// TestCreateTimeIssuanceIsRateLimitedPerRequester: with a burst of 3, a
// node's fourth create decided at create is refused with 429 and a
// Retry-After, nothing is stored or signed, the refusal is counted by
// signer; another node is not affected.
func TestCreateTimeIssuanceIsRateLimitedPerRequester(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir(), "--requester-issuance-burst=3", "--requester-issuance-interval=1h")
	ctx := context.Background()
	const signerName = "rekey.io/kube-apiserver-client-kubelet"
	// Until the server has loaded its Signers and CA keys, creates are
	// answered 503 (no token taken) or approved without a certificate (a
	// token taken): wait with throwaway nodes, one per try, whose buckets
	// the test does not use.
	i := 0
	framework.Eventually(t, 30*time.Second, "a selfnodeclient create signed in its write", func(ctx context.Context) error {
		i++
		waiter, _ := srv.ClientFor(t, fmt.Sprintf("system:node:w%d", i), "system:nodes")
		out, err := waiter.CertificatesV1alpha1().CertificateSigningRequests().CreateSelfNodeClient(ctx, fmt.Sprintf("w%d", i), nodeClientRequest(t, "", fmt.Sprintf("w%d", i)), metav1.CreateOptions{})
		switch {
		case apierrors.IsServiceUnavailable(err):
			return err
		case err != nil:
			return framework.Permanent(fmt.Errorf("waiting for the server: %w", err))
		case len(out.Status.Certificate) == 0:
			return fmt.Errorf("not signed in its write: %s", statusOf(out))
		}
		return nil
	})
	n1, _ := srv.ClientFor(t, "system:node:n1", "system:nodes")
	for i := 1; i <= 3; i++ {
		out, _, err := createSelfNodeClientOnce(ctx, n1, nodeClientRequest(t, fmt.Sprintf("n1-%d", i), "n1"))
		if err != nil || len(out.Status.Certificate) == 0 {
			t.Fatalf("n1's create %d within the burst: %v", i, err)
		}
	}
	recordsBefore := len(issuanceRecords(t, srv, ""))
	_, retryAfter, err := createSelfNodeClientOnce(ctx, n1, nodeClientRequest(t, "n1-4", "n1"))
	if !apierrors.IsTooManyRequests(err) || retryAfter == "" {
		t.Fatalf("n1's fourth create: %v (Retry-After %q), want 429 with a Retry-After", err, retryAfter)
	}
	if _, err := srv.Client.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, "n1-4", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused request was stored: %v", err)
	}
	if n := len(issuanceRecords(t, srv, "")); n != recordsBefore {
		t.Fatalf("the refused create signed: %d records, %d before", n, recordsBefore)
	}
	// Another node has its own bucket.
	n2, _ := srv.ClientFor(t, "system:node:n2", "system:nodes")
	if out, _, err := createSelfNodeClientOnce(ctx, n2, nodeClientRequest(t, "n2-1", "n2")); err != nil || len(out.Status.Certificate) == 0 {
		t.Fatalf("n2 limited by n1's creates: %v", err)
	}
	if v := metricValue(t, srv.Client, `rekey_signer_create_rate_limited_total{signer_name="`+signerName+`"}`); v != 1 {
		t.Fatalf("rate-limited metric %v, want 1", v)
	}
}
