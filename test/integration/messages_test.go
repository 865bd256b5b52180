package integration

import (
	"context"
	"encoding/base64"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

// TestOperatorMessages (issue #32) on one standalone server with the
// insecure test signer: the warning at start, the refusals that need a
// lookup (admission), messages naming the field of a value that does not
// decode, a CA's spec.publish that is not carried out, the insecure
// signer's approval, and a clean SIGTERM that logs no error.
func TestOperatorMessages(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir(), "--enable-insecure-test-signer")
	kubectl := func(stdin string, args ...string) (string, error) {
		t.Helper()
		out, errOut, err := framework.RunKubectl(t, srv.Kubeconfig, []byte(stdin), args...)
		return out + errOut, err
	}
	requireRefused := func(what, manifest, want string) {
		t.Helper()
		out, err := kubectl(manifest, "create", "-f", "-")
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("%s: kubectl create said (err %v):\n%s\nwant it to contain %q", what, err, out, want)
		}
	}

	if !strings.Contains(srv.Log(), "WARNING: --enable-insecure-test-signer is set") {
		t.Errorf("no warning at start about the insecure test signer; log:\n%s", srv.LogTail(20000))
	}

	// A value the decoder refuses names its field.
	requireRefused("a request that is not base64", `
apiVersion: certificates.rekey.io/v1alpha1
kind: CertificateSigningRequest
metadata: {name: not-base64}
spec: {signerName: example.com/team, usages: [client auth], request: "not base64!!"}
`, "spec.request: must be base64 (illegal base64 data at input byte 3)")
	requireRefused("a duration in days", `
apiVersion: rotation.rekey.io/v1alpha1
kind: CertificateAuthority
metadata: {name: days-ca}
spec: {commonName: Days, validity: 3650d}
`, `spec.validity: "3650d" is not a duration`)

	// The refusals that need a lookup: a second RotatingCredential on a
	// Secret, a ClientCertificate minter for a signer no Signer serves.
	if out, err := kubectl(`
apiVersion: rotation.rekey.io/v1alpha1
kind: RotatingCredential
metadata: {name: first, namespace: team-a}
spec:
  secretRef: {name: shared}
  minter: {type: Random}
`, "create", "-f", "-"); err != nil {
		t.Fatalf("the first RotatingCredential on Secret shared (its random block defaulted): %v\n%s", err, out)
	}
	requireRefused("a second RotatingCredential on one Secret", `
apiVersion: rotation.rekey.io/v1alpha1
kind: RotatingCredential
metadata: {name: second, namespace: team-a}
spec:
  secretRef: {name: shared}
  minter: {type: Random, random: {}}
`, `spec.secretRef.name: Invalid value: "shared": RotatingCredential first already keeps its credential in this Secret`)
	requireRefused("a ClientCertificate minter for a signer no Signer serves", `
apiVersion: rotation.rekey.io/v1alpha1
kind: RotatingCredential
metadata: {name: app-cert, namespace: team-a}
spec:
  secretRef: {name: app-cert}
  minter:
    type: ClientCertificate
    clientCertificate: {signerName: example.com/nobody, commonName: app}
`, `spec.minter.clientCertificate.signerName: Invalid value: "example.com/nobody": no Signer serves this signer name`)
	requireRefused("a ClientCertificate minter for system:masters", `
apiVersion: rotation.rekey.io/v1alpha1
kind: RotatingCredential
metadata: {name: admin-cert, namespace: team-a}
spec:
  secretRef: {name: admin-cert}
  minter:
    type: ClientCertificate
    clientCertificate: {signerName: rekey.io/kube-apiserver-client, commonName: app, organizations: [system:masters]}
`, `spec.minter.clientCertificate.organizations[0]: Forbidden: group "system:masters" is never certified`)

	// spec.publish on a server without a host cluster says it is not
	// carried out.
	if out, err := kubectl(`
apiVersion: rotation.rekey.io/v1alpha1
kind: CertificateAuthority
metadata: {name: published-ca}
spec:
  commonName: Published
  publish: {clusterTrustBundle: true}
`, "create", "-f", "-"); err != nil {
		t.Fatalf("creating a CA with spec.publish: %v\n%s", err, out)
	}
	framework.Eventually(t, 30*time.Second, "the CA with spec.publish reports Published=False NoHostCluster", func(ctx context.Context) error {
		ca, err := srv.Client.RotationV1alpha1().CertificateAuthorities().Get(ctx, "published-ca", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(ca.Status.Conditions, rotationv1alpha1.CertificateAuthorityPublished)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != rotationv1alpha1.ReasonNoHostCluster || !strings.Contains(c.Message, "spec.publish is not carried out") {
			return fmt.Errorf("Published is %+v", c)
		}
		return nil
	})

	// The insecure test signer approves without claiming a verification.
	req := fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}})
	if out, err := kubectl(fmt.Sprintf(`
apiVersion: certificates.rekey.io/v1alpha1
kind: CertificateSigningRequest
metadata: {name: insecure-n1}
spec: {signerName: rekey.io/insecure-test, usages: [digital signature, key encipherment, client auth], request: %s}
`, base64.StdEncoding.EncodeToString(req)), "create", "-f", "-"); err != nil {
		t.Fatalf("creating a request for the insecure test signer: %v\n%s", err, out)
	}
	framework.Eventually(t, 30*time.Second, "the insecure test signer's request is approved", func(ctx context.Context) error {
		csr, err := srv.Client.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, "insecure-n1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range csr.Status.Conditions {
			if c.Type == certv1alpha1.CertificateApproved {
				if strings.Contains(c.Message, "TPM") || !strings.Contains(c.Message, "without verifying anything") {
					t.Errorf("the insecure test signer's Approved message claims a verification: %q", c.Message)
				}
				return nil
			}
		}
		return fmt.Errorf("not approved: %+v", csr.Status.Conditions)
	})

	// A clean SIGTERM: no error, no stack trace (the embedded etcd's
	// listeners used to report their closing as errors with stacks).
	srv.Stop(t)
	stopAt := strings.LastIndex(srv.Log(), "Embedded etcd is ready")
	shutdown := srv.Log()[max(stopAt, 0):]
	errorLine := regexp.MustCompile(`(?m)^E\d{4} |"level":"error"|stacktrace|goroutine \d+ \[`)
	if loc := errorLine.FindStringIndex(shutdown); loc != nil {
		from := max(loc[0]-500, 0)
		t.Errorf("the server logged an error or a stack trace after SIGTERM:\n%s", shutdown[from:min(loc[1]+2000, len(shutdown))])
	}
}
