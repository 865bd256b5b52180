package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/controller/signer"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

// TestSignerReadinessFollowsItsCA: deleting the CertificateAuthority a
// Signer uses turns the Signer Ready=False at once, with the reason, and
// making the CA again turns it Ready=True (it stayed Ready=True for
// minutes while approved requests were silently never signed).
func TestSignerReadinessFollowsItsCA(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	client := srv.Client
	spec := rotationv1alpha1.CertificateAuthoritySpec{CommonName: "gone CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256}
	createCAAndSigner(t, client, "gone", spec)
	waitForSignerReady(t, client, "example.com:gone", metav1.ConditionTrue, "CAReady")

	// The server builds one CA-key service on one informer of CAs and
	// Signers, shared by the request path and the controllers: with the
	// controllers running (the Signer above is Ready), each is watched
	// exactly once (it was once per consumer).
	for _, resource := range []string{"certificateauthorities", "signers"} {
		if n := openWatches(t, client, resource); n != 1 {
			t.Errorf("%d watches of %s open, want the one shared informer's", n, resource)
		}
	}

	if err := client.RotationV1alpha1().CertificateAuthorities().Delete(context.Background(), "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// "At once": well inside the 5 s the controllers' informers need at
	// worst, far from the minutes of a resync.
	waitForSignerReady(t, client, "example.com:gone", metav1.ConditionFalse, signer.ReasonCANotFound)

	// A request approved meanwhile waits, unsigned (the signer controller
	// no longer retries it with backoff), and is signed once the CA is
	// back: the CA's change queues it again.
	waiting := createAndApprove(t, client, requestFor(t, "waits-for-its-ca", "example.com/gone", fixtures.CSROptions{CommonName: "waiting"}, certv1alpha1.UsageClientAuth))
	if len(waiting.Status.Certificate) != 0 {
		t.Fatal("signed without its CA")
	}

	if _, err := client.RotationV1alpha1().CertificateAuthorities().Create(context.Background(), &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: "gone"}, Spec: spec,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForSignerReady(t, client, "example.com:gone", metav1.ConditionTrue, "CAReady")
	waitFor(t, client, waiting.Name, 10*time.Second, func(csr *certv1alpha1.CertificateSigningRequest) bool { return len(csr.Status.Certificate) > 0 })
}

// openWatches reads how many watches of a rekey resource the server holds
// open, from its apiserver_longrunning_requests gauge.
func openWatches(t *testing.T, client clientset.Interface, resource string) int {
	t.Helper()
	body, err := client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "apiserver_longrunning_requests{") && strings.Contains(line, `resource="`+resource+`"`) && strings.Contains(line, `verb="WATCH"`) {
			v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			n += int(v)
		}
	}
	return n
}

func waitForSignerReady(t *testing.T, client clientset.Interface, name string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	framework.Eventually(t, 10*time.Second, fmt.Sprintf("Signer %s Ready=%s %s", name, status, reason), func(ctx context.Context) error {
		s, err := client.CertificatesV1alpha1().Signers().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(s.Status.Conditions, certv1alpha1.SignerReady)
		if c == nil || c.Status != status || c.Reason != reason {
			return fmt.Errorf("Ready is %+v", c)
		}
		return nil
	})
}
