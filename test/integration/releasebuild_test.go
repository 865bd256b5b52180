package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/test/framework"
)

// crashPointVariables are, per binary, the variables that stop a process
// built with framework.TestBuildTag (pkg/crashpoint); only that build reads
// them.
var crashPointVariables = map[string][]string{
	"rekey-apiserver": {"REKEY_TEST_KILL_AT", "REKEY_TEST_PAUSE_AT", "REKEY_TEST_CREDENTIAL_PAUSE_DIR"},
	"rekey-agent":     {"REKEY_AGENT_TEST_KILL_AT"},
}

// TestReleaseBinariesHaveNoCrashPoints builds rekey-apiserver and
// rekey-agent as a release is built (no build tag) and checks that neither
// holds the name of a crash-point variable, where the test build, which the
// other tests run, holds each one it reads.
func TestReleaseBinariesHaveNoCrashPoints(t *testing.T) {
	t.Parallel()
	for name, reads := range crashPointVariables {
		release, err := framework.ReleaseBinaryPath(name)
		if err != nil {
			t.Fatal(err)
		}
		releaseData, err := os.ReadFile(release)
		if err != nil {
			t.Fatal(err)
		}
		testData, err := os.ReadFile(framework.Binary(t, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, vars := range crashPointVariables {
			for _, v := range vars {
				if bytes.Contains(releaseData, []byte(v)) {
					t.Errorf("the release %s holds %s", name, v)
				}
			}
		}
		// The witness that the search finds them where they are.
		for _, v := range reads {
			if !bytes.Contains(testData, []byte(v)) {
				t.Errorf("the %s built with -tags %s lacks %s", name, framework.TestBuildTag, v)
			}
		}
	}
}

// TestReleaseServerIgnoresTheCrashPointVariables runs the release
// rekey-apiserver with REKEY_TEST_KILL_AT and REKEY_TEST_PAUSE_AT naming two
// steps every rotation passes (in a test build the first kills the
// process, the second holds the rotation): the server starts, its CA
// becomes Ready, a rotation reaches Prepared through both steps, and the
// process stays up afterwards.
func TestReleaseServerIgnoresTheCrashPointVariables(t *testing.T) {
	t.Parallel()
	release, err := framework.ReleaseBinaryPath("rekey-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	srv := framework.StartStandaloneBinary(t, release, t.TempDir(), []string{
		"REKEY_TEST_KILL_AT=preparing-key-made",
		"REKEY_TEST_PAUSE_AT=preparing-bound",
		"REKEY_TEST_CREDENTIAL_PAUSE_DIR=" + t.TempDir(),
	})
	client := srv.Client
	createCAAndSigner(t, client, "release", rotationv1alpha1.CertificateAuthoritySpec{CommonName: "release CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256, Rotation: framework.ImmediateRotation()})
	waitForCA(t, client, "release", "Ready", func(ca *rotationv1alpha1.CertificateAuthority) bool {
		return apimeta.IsStatusConditionTrue(ca.Status.Conditions, rotationv1alpha1.CertificateAuthorityReady)
	})
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Rotate(context.Background(), "release",
		&rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Prepared is recorded only after both steps were reached.
	framework.Eventually(t, 60*time.Second, "the rotation reaches Prepared", func(ctx context.Context) error {
		if srv.Exited() {
			return framework.Permanent(errors.New("rekey-apiserver exited: it obeyed a crash-point variable"))
		}
		ca, err := client.RotationV1alpha1().CertificateAuthorities().Get(ctx, "release", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ca.Status.Phase != rotationv1alpha1.PhasePrepared {
			return fmt.Errorf("phase %q", ca.Status.Phase)
		}
		return nil
	})
	framework.Stays(t, 3*time.Second, "the release server keeps running", func(ctx context.Context) error {
		if srv.Exited() {
			return errors.New("rekey-apiserver exited")
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return err
		}
		if string(body) != "ok" {
			return errors.New("readyz: " + string(body))
		}
		return nil
	})
}
