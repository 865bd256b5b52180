package integration

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/strictpem"
	"rekey.io/rekey/test/framework"
)

// TestTrustSync runs `rekey-agent trust-sync` against a real kube-apiserver
// and rekey, as a user bound to the shipped rekey:trust-consumer role:
// --once writes the fixed certificates and the CA's bundle and reports
// what the file holds; running on, it follows a rotation, so that the
// file holds the next CA and the report names it, which is what lets
// the rotation reach Prepared without anyone else reporting.
func TestTrustSync(t *testing.T) {
	t.Parallel()
	cluster := kubeCluster(t)
	ctx := context.Background()
	admin := cluster.RekeyAdmin
	// The cluster is shared (kubeCluster): what this test makes is named
	// after its CA, synced, or its consumer, kube-apiserver-sync.
	createCAAndSigner(t, admin, "synced", rotationv1alpha1.CertificateAuthoritySpec{CommonName: "synced CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256,
		Rotation: &rotationv1alpha1.RotationPolicy{TrustPropagation: &metav1.Duration{Duration: time.Second}, RenewalWindow: &metav1.Duration{}}})
	old := caOf(t, admin, "synced")

	const user = "trust-sync:kube-apiserver-sync"
	if _, err := cluster.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "it-trust-sync-kube-apiserver-sync"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "rekey:trust-consumer"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := cluster.UserKubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// kube-apiserver's --client-ca-file also holds the cluster's own CA.
	fixed := filepath.Join(dir, "cluster-ca.crt")
	if err := os.WriteFile(fixed, cluster.ClientCA.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "client-ca.crt")
	args := []string{"trust-sync", "--kubeconfig", kubeconfig, "--consumer", "kube-apiserver-sync", "--file", file, "--ca", "synced", "--include", fixed}

	// The file holds these certificates, in this order.
	holdsFile := func(want ...*x509.Certificate) error {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		certs, err := strictpem.Certificates(data, 16)
		if err != nil {
			return err
		}
		if !slices.EqualFunc(certs, want, func(a, b *x509.Certificate) bool { return a.Equal(b) }) {
			return fmt.Errorf("the file holds %d certificates, not the %d expected in order", len(certs), len(want))
		}
		return nil
	}
	// The consumer reports holding exactly these fingerprints of the CA.
	reports := func(ctx context.Context, fingerprints ...string) error {
		tc, err := admin.RotationV1alpha1().TrustConsumers().Get(ctx, "kube-apiserver-sync", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(tc.Status.Holds) != 1 || tc.Status.Holds[0].CertificateAuthority != "synced" || tc.Status.Holds[0].ReportTime == nil {
			return fmt.Errorf("holds %+v, want one report for synced", tc.Status.Holds)
		}
		slices.Sort(fingerprints)
		if got := slices.Sorted(slices.Values(tc.Status.Holds[0].Fingerprints)); !slices.Equal(got, fingerprints) {
			return fmt.Errorf("reported %v, want %v", got, fingerprints)
		}
		if tc.Spec.Reporter != user || !slices.Equal(tc.Spec.CertificateAuthorities, []string{"synced"}) {
			return fmt.Errorf("spec %+v, want reporter %s naming synced", tc.Spec, user)
		}
		return nil
	}

	// --once, retried while the binding reaches rekey's authorizer.
	framework.Eventually(t, tcSettle, "trust-sync --once", func(context.Context) error {
		out, err := runAgent(t, append(args, "--once")...)
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	if err := holdsFile(cluster.ClientCA.Cert, old); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(file); err != nil || info.Mode().Perm() != 0o644 {
		t.Fatalf("the file's mode: %v, %v; want 0644", info, err)
	}
	if err := reports(ctx, fingerprint(old)); err != nil {
		t.Fatal(err)
	}
	// A consumer name the server would refuse is refused before asking.
	if out, err := runAgent(t, "trust-sync", "--kubeconfig", kubeconfig, "--consumer", "Kube_APIServer", "--file", file, "--ca", "synced", "--once"); err == nil {
		t.Fatalf("an invalid consumer name was accepted: %s", out)
	}

	// Running on, through a rotation: the file gains the next CA, the
	// report names it, and with that the gate opens.
	framework.StartAgent(t, args...)
	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "synced", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca := waitForCA(t, admin, "synced", "Preparing with a next CA", func(ca *rotationv1alpha1.CertificateAuthority) bool {
		return ca.Status.Next != nil || ca.Status.Phase == rotationv1alpha1.PhasePrepared
	})
	if ca.Status.Next == nil {
		t.Fatalf("reached %s without a next CA in status", ca.Status.Phase)
	}
	next := parseCA(t, ca.Status.Next)
	framework.Eventually(t, 60*time.Second, "the file holding the next CA and the report naming it", func(ctx context.Context) error {
		if err := holdsFile(cluster.ClientCA.Cert, old, next); err != nil {
			// From Prepared the bundle is the new CA, then the old one.
			if err2 := holdsFile(cluster.ClientCA.Cert, next, old); err2 != nil {
				return errors.Join(err, err2)
			}
		}
		return reports(ctx, fingerprint(old), fingerprint(next))
	})
	waitForCA(t, admin, "synced", "Prepared (trust-sync the only consumer)", func(ca *rotationv1alpha1.CertificateAuthority) bool {
		return ca.Status.Phase == rotationv1alpha1.PhasePrepared && ca.Status.Current != nil && ca.Status.Current.Fingerprint == fingerprint(next)
	})
	// Complete: the old CA leaves the bundle, and the file.
	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "synced", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete, Force: true}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "the old CA gone from the file and the report", func(ctx context.Context) error {
		if err := holdsFile(cluster.ClientCA.Cert, next); err != nil {
			return err
		}
		return reports(ctx, fingerprint(next))
	})
}
