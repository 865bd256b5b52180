package e2e

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"rekey.io/rekey/pkg/agent"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/test/framework"
)

const kubeletClientCA = "rekey.io-kube-apiserver-client-kubelet"

// trustKubeletClientCA makes kube-apiserver trust the kubelet client CA's
// current trust bundle, as an operator does with --client-ca-file.
func trustKubeletClientCA(t *testing.T) *rotationv1alpha1.CertificateAuthority {
	t.Helper()
	// On a fresh cluster the built-in CA and its key appear a moment after
	// rekey starts.
	var ca *rotationv1alpha1.CertificateAuthority
	framework.Eventually(t, 60*time.Second, "the kubelet client CA's trust bundle", func(ctx context.Context) error {
		var err error
		if ca, err = cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(ctx, kubeletClientCA, metav1.GetOptions{}); err != nil {
			return err
		}
		if ca.Status.TrustBundle == "" {
			return fmt.Errorf("no trust bundle: %+v", ca.Status)
		}
		return nil
	})
	if err := cluster.TrustClientCAs([]byte(ca.Status.TrustBundle)); err != nil {
		t.Fatal(err)
	}
	return ca
}

// whoAmI asks kube-apiserver who the node kubeconfig's certificate is,
// retrying while kube-apiserver reloads its client CA file.
func whoAmI(t *testing.T, kubeconfig string) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	framework.Eventually(t, 30*time.Second, "the node kubeconfig authenticating to kube-apiserver", func(ctx context.Context) error {
		review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		name = review.Status.UserInfo.Username
		return nil
	})
	return name
}

func rotateAndWait(t *testing.T, action rotationv1alpha1.RotationAction, force bool, phase rotationv1alpha1.RotationPhase) *rotationv1alpha1.CertificateAuthority {
	t.Helper()
	ctx := context.Background()
	if _, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, kubeletClientCA, &rotationv1alpha1.Rotation{Action: action, Force: force}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("rotation %s: %v", action, err)
	}
	return waitCAPhase(t, kubeletClientCA, phase)
}

// waitCAPhase waits until the CA is in phase and returns it.
func waitCAPhase(t *testing.T, name string, phase rotationv1alpha1.RotationPhase) *rotationv1alpha1.CertificateAuthority {
	t.Helper()
	var ca *rotationv1alpha1.CertificateAuthority
	framework.Eventually(t, 60*time.Second, fmt.Sprintf("CA %s in phase %s", name, phase), func(ctx context.Context) error {
		var err error
		if ca, err = cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if ca.Status.Phase != phase {
			return fmt.Errorf("phase %q: %+v", ca.Status.Phase, ca.Status.Conditions)
		}
		return nil
	})
	return ca
}

// TestAgentAgainstKubeAPIServer: rekey-agent bootstraps a node's client
// certificate through the aggregator with a bootstrap identity, writes a
// kubeconfig kube-apiserver accepts as the node, and renews at once when
// the kubelet client CA rotates, twice (its watch on the CA wakes it: the
// periodic look is ten minutes away); after each rotation completes, the
// node still authenticates, with a certificate of the new key.
func TestAgentAgainstKubeAPIServer(t *testing.T) {
	trustKubeletClientCA(t)
	bootstrap, err := cluster.UserKubeconfig("system:bootstrap:e2eagent", "system:bootstrappers")
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	nodeKubeconfig := filepath.Join(t.TempDir(), "node.kubeconfig")
	framework.StartAgent(t, "run", "--bootstrap-kubeconfig", bootstrap, "--kubeconfig", nodeKubeconfig,
		"--cert-dir", certDir, "--node-name", "e2e-agent-node", "--issuer-check-interval", "10m", "--wait-timeout", "2m")
	store := &agent.Store{Dir: certDir, Prefix: agent.PrefixClient}
	current := func() *x509.Certificate {
		pair, err := store.Current()
		if err != nil {
			return nil
		}
		return pair.Leaf
	}
	waitForCertificate := func(what string, ok func(*x509.Certificate) bool) *x509.Certificate {
		t.Helper()
		var leaf *x509.Certificate
		framework.Eventually(t, 90*time.Second, "a certificate "+what, func(context.Context) error {
			if leaf = current(); leaf == nil || !ok(leaf) {
				return errors.New("not in the store yet")
			}
			return nil
		})
		return leaf
	}
	first := waitForCertificate("from the bootstrap", func(*x509.Certificate) bool { return true })
	if got := whoAmI(t, nodeKubeconfig); got != "system:node:e2e-agent-node" {
		t.Fatalf("kube-apiserver sees the node as %q", got)
	}

	// The test is about renewing, not about when: the new CA signs once
	// published and the agent renews at once.
	if err := framework.SetImmediateRotation(context.Background(), cluster.RekeyAdmin, kubeletClientCA); err != nil {
		t.Fatal(err)
	}
	previous := first
	for round := 1; round <= 2; round++ {
		ca := rotateAndWait(t, rotationv1alpha1.RotationStart, false, rotationv1alpha1.PhasePrepared)
		// Trust old and new while both are in the bundle.
		if err := cluster.TrustClientCAs([]byte(ca.Status.TrustBundle)); err != nil {
			t.Fatal(err)
		}
		renewed := waitForCertificate(fmt.Sprintf("renewed in rotation %d", round), func(c *x509.Certificate) bool { return !c.Equal(previous) })
		if renewed.Subject.CommonName != "system:node:e2e-agent-node" {
			t.Fatalf("renewed subject %v", renewed.Subject)
		}
		ca = rotateAndWait(t, rotationv1alpha1.RotationComplete, true, rotationv1alpha1.PhaseCompleted)
		if err := cluster.TrustClientCAs([]byte(ca.Status.TrustBundle)); err != nil {
			t.Fatal(err)
		}
		if got := whoAmI(t, nodeKubeconfig); got != "system:node:e2e-agent-node" {
			t.Fatalf("after rotation %d kube-apiserver sees the node as %q", round, got)
		}
		previous = renewed
	}
}
