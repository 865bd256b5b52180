package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/test/framework"
)

// A real server's leader reports its CAs and Signers on /metrics with the
// values of their status: the series the shipped alerts read
// (artifacts/monitoring/rekey-alerts.yaml; pkg/monitoringcheck checks the
// names against the registered metrics) exist outside a unit test.
func TestServerExportsTheSeriesTheAlertsRead(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	client := srv.Client
	const caName, signerName = "rekey.io-kube-apiserver-client", "rekey.io/kube-apiserver-client"
	framework.Eventually(t, 30*time.Second, "the built-in CA and Signer on /metrics", func(ctx context.Context) error {
		ca, err := client.RotationV1alpha1().CertificateAuthorities().Get(ctx, caName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ca.Status.Current == nil {
			return fmt.Errorf("CertificateAuthority %s has no certificate yet", caName)
		}
		notAfter, err := readMetricValue(ctx, client, `rekey_ca_certificate_not_after_timestamp_seconds{ca="`+caName+`",key="current"}`)
		if err != nil {
			return err
		}
		if want := float64(ca.Status.Current.NotAfter.Unix()); notAfter != want {
			return fmt.Errorf("rekey_ca_certificate_not_after_timestamp_seconds{key=current} = %v, want status.current.notAfter %v", notAfter, want)
		}
		if phase, err := readMetricValue(ctx, client, `rekey_ca_rotation_phase{ca="`+caName+`",phase="none"}`); err != nil || phase != 1 {
			return fmt.Errorf("rekey_ca_rotation_phase{phase=none} = %v, %v; want 1", phase, err)
		}
		if ready, err := readMetricValue(ctx, client, `rekey_signer_ready{signer_name="`+signerName+`"}`); err != nil || ready != 1 {
			return fmt.Errorf("rekey_signer_ready = %v, %v; want 1", ready, err)
		}
		return nil
	})
}
