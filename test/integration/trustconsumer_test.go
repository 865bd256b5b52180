package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/framework"
)

// tcSettle is how long RBAC bindings take to reach rekey's delegated
// authorizer (its decisions are cached for seconds).
const tcSettle = 30 * time.Second

func tcFingerprint(i int) string { return fmt.Sprintf("SHA256:%064x", i) }

// TestTrustConsumer runs TrustConsumers behind a real kube-apiserver with
// RBAC and the roles artifacts/rbac ships: who may register a consumer of
// which CA, that the registering user becomes its reporter and alone
// reports, that report times are the server's, and that bad objects are
// refused naming the field.
func TestTrustConsumer(t *testing.T) {
	t.Parallel()
	cluster := kubeCluster(t)
	ctx := context.Background()
	admin := cluster.Admin

	// The cluster is shared (kubeCluster): the names of what this test
	// makes, its users, and the CAs its consumers name, all carry "tc".

	// trust on CAs tc-a and tc-c only, with resourceNames, beside the shipped
	// rekey:trust-reporter: as docs/trust-consumers.md tells operators.
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "it-tc-trust-a-c"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"rotation.rekey.io"}, Resources: []string{"certificateauthorities"},
			ResourceNames: []string{"tc-a", "tc-c"}, Verbs: []string{"trust"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind := func(user string, roles ...string) clientset.Interface {
		for _, role := range roles {
			name := strings.NewReplacer(":", "-").Replace("it-" + user + "-" + role)
			if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
				Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatalf("binding %s to %s: %v", user, role, err)
			}
		}
		c, _, err := cluster.UserClient(user)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	requester := bind("tc-requester", "rekey:requester")
	syncer := bind("tc-syncer", "rekey:trust-reporter", "it-tc-trust-a-c")
	other := bind("tc-other", "rekey:trust-consumer")
	consumer := func(name string, cas ...string) *rotationv1alpha1.TrustConsumer {
		return &rotationv1alpha1.TrustConsumer{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: rotationv1alpha1.TrustConsumerSpec{CertificateAuthorities: cas}}
	}
	forbidden := func(t *testing.T, err error, mentions ...string) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Fatalf("want 403 Forbidden, got %v", err)
		}
		for _, m := range mentions {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("403 does not name %s: %v", m, err)
			}
		}
	}

	// (c) The registering user is the reporter, whatever the client sent.
	// Registering is retried until the bindings have reached rekey.
	var registered *rotationv1alpha1.TrustConsumer
	framework.Eventually(t, tcSettle, "tc-syncer registering kube-apiserver-tc", func(ctx context.Context) error {
		tc := consumer("kube-apiserver-tc", "tc-a", "tc-c")
		tc.Spec.Reporter = "mallory"
		tc.Status.Holds = []rotationv1alpha1.TrustHeld{{CertificateAuthority: "tc-a", Fingerprints: []string{tcFingerprint(1)}}}
		var err error
		registered, err = syncer.RotationV1alpha1().TrustConsumers().Create(ctx, tc, metav1.CreateOptions{})
		return err
	})
	if registered.Spec.Reporter != "tc-syncer" || len(registered.Status.Holds) != 0 {
		t.Fatalf("reporter %q (want tc-syncer), status %+v (want empty)", registered.Spec.Reporter, registered.Status)
	}
	framework.Eventually(t, tcSettle, "other registering its own consumer", func(ctx context.Context) error {
		_, err := other.RotationV1alpha1().TrustConsumers().Create(ctx, consumer("tc-other", "tc-b"), metav1.CreateOptions{})
		return err
	})

	t.Run("a requester cannot register a consumer", func(t *testing.T) {
		// The requester's own rights work (so its binding has settled)...
		framework.Eventually(t, tcSettle, "requester listing its requests", func(ctx context.Context) error {
			_, err := requester.CertificatesV1alpha1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
			return err
		})
		// ...and do not reach trustconsumers.
		_, err := requester.RotationV1alpha1().TrustConsumers().Create(ctx, consumer("tc-blocker", "rekey.io-kube-apiserver-client"), metav1.CreateOptions{})
		forbidden(t, err, "trustconsumers")
	})

	t.Run("a node registers only the consumer named after it", func(t *testing.T) {
		bind("system:node:tc-n1", "rekey:trust-consumer")
		node, _, err := cluster.UserClient("system:node:tc-n1", "system:nodes")
		if err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, tcSettle, "the node registering its own consumer", func(ctx context.Context) error {
			_, err := node.RotationV1alpha1().TrustConsumers().Create(ctx, consumer("node.tc-n1", "tc-a"), metav1.CreateOptions{})
			return err
		})
		// Its role grants trust on every CA: the name is what stops it.
		_, err = node.RotationV1alpha1().TrustConsumers().Create(ctx, consumer("tc-kube-apiserver-cp1", "tc-a"), metav1.CreateOptions{})
		forbidden(t, err, "may only register and report for the trust consumer", `"node.tc-n1"`)
		// And the node. prefix is the nodes' alone: a user with trust on
		// the CA may not take a node's consumer name.
		_, err = syncer.RotationV1alpha1().TrustConsumers().Create(ctx, consumer("node.tc-n2", "tc-a"), metav1.CreateOptions{})
		forbidden(t, err, "are for nodes")
	})

	t.Run("registering needs trust on each CA named", func(t *testing.T) {
		_, err := syncer.RotationV1alpha1().TrustConsumers().Create(ctx, consumer("tc-kubelet", "tc-a", "tc-b"), metav1.CreateOptions{})
		forbidden(t, err, `CertificateAuthority "tc-b"`, `verb "trust"`, `resourceName "tc-b"`)
		if _, err := cluster.RekeyAdmin.RotationV1alpha1().TrustConsumers().Get(ctx, "tc-kubelet", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the refused consumer exists: %v", err)
		}
		// Adding tc-b to the registered consumer is refused the same way.
		cur, err := syncer.RotationV1alpha1().TrustConsumers().Get(ctx, "kube-apiserver-tc", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.CertificateAuthorities = append(cur.Spec.CertificateAuthorities, "tc-b")
		_, err = syncer.RotationV1alpha1().TrustConsumers().Update(ctx, cur, metav1.UpdateOptions{})
		forbidden(t, err, `CertificateAuthority "tc-b"`)
	})

	t.Run("only the reporter writes", func(t *testing.T) {
		tcs := other.RotationV1alpha1().TrustConsumers()
		cur, err := tcs.Get(ctx, "kube-apiserver-tc", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		const who = `only "tc-syncer", which registered trust consumer "kube-apiserver-tc", may report for it`
		report := cur.DeepCopy()
		report.Status.Holds = []rotationv1alpha1.TrustHeld{{CertificateAuthority: "tc-a", Fingerprints: []string{tcFingerprint(7)}}}
		_, err = tcs.UpdateStatus(ctx, report, metav1.UpdateOptions{})
		forbidden(t, err, who)
		_, err = tcs.Patch(ctx, "kube-apiserver-tc", types.MergePatchType,
			[]byte(fmt.Sprintf(`{"status":{"holds":[{"certificateAuthority":"tc-a","fingerprints":[%q]}]}}`, tcFingerprint(7))), metav1.PatchOptions{}, "status")
		forbidden(t, err, who)
		respec := cur.DeepCopy()
		respec.Spec.CertificateAuthorities = []string{"tc-a"}
		_, err = tcs.Update(ctx, respec, metav1.UpdateOptions{})
		forbidden(t, err, who)
		_, err = tcs.Patch(ctx, "kube-apiserver-tc", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
		forbidden(t, err, who)
		got, err := cluster.RekeyAdmin.RotationV1alpha1().TrustConsumers().Get(ctx, "kube-apiserver-tc", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Holds) != 0 || len(got.Spec.CertificateAuthorities) != 2 || got.Labels["x"] != "" {
			t.Fatalf("another user's write landed: %+v", got)
		}
		// Even system:masters does not report for tc-syncer.
		_, err = cluster.RekeyAdmin.RotationV1alpha1().TrustConsumers().UpdateStatus(ctx, report, metav1.UpdateOptions{})
		forbidden(t, err, who)
	})

	t.Run("report times are the server's and move only with the fingerprints", func(t *testing.T) {
		tcs := syncer.RotationV1alpha1().TrustConsumers()
		forged := metav1.NewTime(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))
		cur, err := tcs.Get(ctx, "kube-apiserver-tc", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before := time.Now().Add(-time.Minute)
		cur.Status.Holds = []rotationv1alpha1.TrustHeld{
			{CertificateAuthority: "tc-a", Fingerprints: []string{tcFingerprint(1), tcFingerprint(2)}, ReportTime: &forged},
			{CertificateAuthority: "tc-c", Fingerprints: []string{tcFingerprint(10)}},
		}
		first, err := tcs.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		aTime := first.Status.Holds[0].ReportTime
		if aTime == nil || aTime.Before(&metav1.Time{Time: before}) || first.Status.Holds[1].ReportTime == nil {
			t.Fatalf("report times %+v: want the server's, not the client's %v", first.Status.Holds, forged)
		}
		// Report a's same fingerprints (in another order) and a change of
		// c's until the server's clock has passed a's time: c's time moves
		// with its change, a's does not.
		last := first
		n := 10
		framework.Eventually(t, 10*time.Second, "c's report time passing a's", func(ctx context.Context) error {
			n++
			report := last.DeepCopy()
			report.Status.Holds[0].Fingerprints = []string{tcFingerprint(2), tcFingerprint(1)}
			report.Status.Holds[0].ReportTime = &forged
			report.Status.Holds[1].Fingerprints = []string{tcFingerprint(n)}
			got, err := tcs.UpdateStatus(ctx, report, metav1.UpdateOptions{})
			if err != nil {
				return framework.Permanent(err)
			}
			last = got
			if !got.Status.Holds[0].ReportTime.Equal(aTime) {
				return framework.Permanent(fmt.Errorf("a's unchanged report moved its time from %v to %v", aTime, got.Status.Holds[0].ReportTime))
			}
			if !aTime.Before(got.Status.Holds[1].ReportTime) {
				return errors.New("the server's clock is still in a's second")
			}
			return nil
		})
		cTime := last.Status.Holds[1].ReportTime
		report := last.DeepCopy()
		report.Status.Holds[0].Fingerprints = []string{tcFingerprint(3)}
		got, err := tcs.UpdateStatus(ctx, report, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a := got.Status.Holds[0].ReportTime; a.Before(cTime) || a.Equal(aTime) {
			t.Fatalf("a's changed report: time %v, want at least %v", a, cTime)
		}
		if c := got.Status.Holds[1].ReportTime; !c.Equal(cTime) {
			t.Fatalf("c's unchanged report: time moved from %v to %v", cTime, c)
		}
	})

	t.Run("validation errors name the field", func(t *testing.T) {
		tcs := syncer.RotationV1alpha1().TrustConsumers()
		for field, tc := range map[string]*rotationv1alpha1.TrustConsumer{
			"metadata.name":                  consumer("Not_A_Name", "tc-a"),
			"spec.certificateAuthorities":    consumer("tc-no-cas"),
			"spec.certificateAuthorities[1]": consumer("tc-bad-ca", "tc-a", "Bad_CA"),
		} {
			_, err := tcs.Create(ctx, tc, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), field) {
				t.Errorf("%s: want 422 naming %s, got %v", tc.Name, field, err)
			}
		}
		cur, err := tcs.Get(ctx, "kube-apiserver-tc", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for field, holds := range map[string][]rotationv1alpha1.TrustHeld{
			"status.holds[0].fingerprints[0]":      {{CertificateAuthority: "tc-a", Fingerprints: []string{"sha256:" + strings.Repeat("a", 64)}}},
			"status.holds[0].certificateAuthority": {{CertificateAuthority: "tc-b"}},
			"status.holds[1].certificateAuthority": {{CertificateAuthority: "tc-a"}, {CertificateAuthority: "tc-a"}},
			"status.holds[0].fingerprints":         {{CertificateAuthority: "tc-a", Fingerprints: []string{tcFingerprint(1), tcFingerprint(2), tcFingerprint(3), tcFingerprint(4), tcFingerprint(5), tcFingerprint(6), tcFingerprint(7), tcFingerprint(8), tcFingerprint(9)}}},
		} {
			report := cur.DeepCopy()
			report.Status.Holds = holds
			_, err := tcs.UpdateStatus(ctx, report, metav1.UpdateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), field) {
				t.Errorf("want 422 naming %s, got %v", field, err)
			}
		}
		cur.Spec.Reporter = "tc-other"
		_, err = tcs.Update(ctx, cur, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("an update sending another reporter: %v", err)
		}
		got, err := tcs.Get(ctx, "kube-apiserver-tc", metav1.GetOptions{})
		if err != nil || got.Spec.Reporter != "tc-syncer" {
			t.Fatalf("reporter after an update that sent another: %v %q", err, got.Spec.Reporter)
		}
	})

	t.Run("an operator removes a consumer with RBAC alone", func(t *testing.T) {
		rotator := bind("tc-rotator", "rekey:ca-rotator")
		framework.Eventually(t, tcSettle, "tc-rotator deleting kube-apiserver-tc", func(ctx context.Context) error {
			return rotator.RotationV1alpha1().TrustConsumers().Delete(ctx, "kube-apiserver-tc", metav1.DeleteOptions{})
		})
	})
}
