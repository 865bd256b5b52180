package e2e

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rekey.io/rekey/pkg/agent"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/test/framework"
)

const (
	// userClientCA is the CA behind rekey.io/kube-apiserver-client, the
	// signer of kubeconfig users' certificates.
	userClientCA = "rekey.io-kube-apiserver-client"
	userSigner   = "rekey.io/kube-apiserver-client"
	// apiServerConsumer is the TrustConsumer trust-sync reports as for
	// kube-apiserver's --client-ca-file.
	apiServerConsumer = "e2e-kube-apiserver"
	// trustUser is the kubeconfig user whose certificate rekey issues.
	trustUser = "e2e-trust-user"
	// trustNode is a node identity (no kubelet) that gets client
	// certificates of the kubelet client CA through selfnodeclient.
	trustNode = "e2e-trust-node"
	// The rotation's timing: long enough to see each step, short enough
	// for the suite.
	trustPropagation = 5 * time.Second
	renewalWindow    = 30 * time.Second
)

// TestRotationWaitsForKubeAPIServersTrust is issue #29's proof on the real
// cluster. kube-apiserver's --client-ca-file is written only by
// `rekey-agent trust-sync` (the framework's own client CA comes in with
// --include), for the kubelet client CA and the kubeconfig users' CA. A
// real kubelet runs on rekey-agent's exec credential, and a kubeconfig
// user with a certificate of rekey.io/kube-apiserver-client makes requests
// all along. Both CAs are rotated with trust-sync stopped: they stay
// Preparing, name the consumer, and a request approved meanwhile is signed
// by the old CA (for each CA: a node's client certificate through
// selfnodeclient, and a user's). Once trust-sync runs again, kube-apiserver
// reloads the file, the CAs reach Prepared, the agent renews inside the
// renewal window, the user renews, and Complete is accepted without force.
// From the test's start (before trust-sync and the kubelet start) to its
// end kube-apiserver refuses no request (no 401, no failed authentication:
// the node's, as its bootstrap user or as system:node:NAME, the user's or
// anyone's), the Node stays Ready and its Lease keeps renewing; the kubelet
// renews its Lease with the renewed certificate before Complete.
//
// It replaces the framework's copy of the bundle into --client-ca-file
// (Cluster.TrustClientCAs) for this test. That file is shared: the test is
// serial (no t.Parallel), so no other test writes the file while it runs
// (parallel tests start only after every serial one has ended), and it
// stops trust-sync and deletes its TrustConsumer at the end, so that later
// tests own the file and rotate these CAs without waiting for a consumer
// that is gone.
func TestRotationWaitsForKubeAPIServersTrust(t *testing.T) {
	skipUnlessRoot(t)
	ctx := context.Background()
	// The no-401 window opens here, before trust-sync writes the file and
	// before the kubelet and its agent bootstrap: the whole run.
	testStart := time.Now()
	authFailures := authenticationFailures(t)
	cas := []string{kubeletClientCA, userClientCA}
	restoreRotationPolicy(t, cas...)
	ts := startTrustSync(t, cas)

	// Setup: a rotation of each CA with trust-sync running, so that the
	// old key of the rotation under test has issued only this test's
	// certificates (earlier tests' nodes and users are never renewed) and
	// Complete without force depends on them alone.
	setRotationPolicy(t, 0, 0, cas...)
	rotateAll(t, rotationv1alpha1.RotationStart, false, rotationv1alpha1.PhasePrepared, cas...)
	rotateAll(t, rotationv1alpha1.RotationComplete, true, rotationv1alpha1.PhaseCompleted, cas...)
	ts.waitHolding(t, cas...)
	setRotationPolicy(t, trustPropagation, renewalWindow, cas...)

	node := startKubeletTrusted(t, kubeletNode, []string{"--issuer-check-interval", "1m", "--wait-timeout", "2m"}, nil)
	store := &agent.Store{Dir: node.CertDir, Prefix: agent.PrefixClient}
	current := func() *x509.Certificate {
		pair, err := store.Current()
		if err != nil {
			return nil
		}
		return pair.Leaf
	}
	bootstrapCert := current()
	if bootstrapCert == nil {
		t.Fatal("the agent's store holds no certificate")
	}

	// The kubeconfig user, with a certificate of the users' CA, reading a
	// ConfigMap (a request kube-apiserver's audit log records) in a loop.
	userCertA := issueUserCertificate(t, "e2e-trust-user-a")
	userLoopA := startUserLoop(t, userCertA)

	// The Node is Ready; its Lease follows.
	leaseRenewedAfter(t, kubeletNode, time.Time{})
	watchdog := startNodeWatchdog(t, kubeletNode)

	// Rotate both with trust-sync stopped.
	ts.stop(t)
	for _, ca := range cas {
		if _, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, ca, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("Start %s: %v", ca, err)
		}
	}
	var published time.Time
	olds := map[string]*x509.Certificate{}
	nexts := map[string]*x509.Certificate{}
	for _, name := range cas {
		framework.Eventually(t, 30*time.Second, name+" Preparing, waiting for "+apiServerConsumer, func(ctx context.Context) error {
			ca, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cond := apimeta.FindStatusCondition(ca.Status.Conditions, rotationv1alpha1.CertificateAuthorityTrustPropagated)
			switch {
			case ca.Status.Phase != rotationv1alpha1.PhasePreparing || ca.Status.Next == nil || ca.Status.Trust == nil || ca.Status.Trust.PublishedTime == nil:
				return fmt.Errorf("phase %s, next %v, trust %+v", ca.Status.Phase, ca.Status.Next != nil, ca.Status.Trust)
			case cond == nil || cond.Reason != rotationv1alpha1.ReasonWaitingForConsumers || !strings.Contains(cond.Message, apiServerConsumer):
				return fmt.Errorf("TrustPropagated condition %+v does not name %s", cond, apiServerConsumer)
			case !slices.Equal(ca.Status.Trust.WaitingFor, []string{apiServerConsumer}):
				return fmt.Errorf("status.trust.waitingFor %v", ca.Status.Trust.WaitingFor)
			}
			olds[name], nexts[name] = caCert(t, ca.Status.Current), caCert(t, ca.Status.Next)
			if p := ca.Status.Trust.PublishedTime.Time; p.After(published) {
				published = p
			}
			return nil
		})
	}

	// Meanwhile the old CA signs: a request approved now (same user,
	// same subject) gets a certificate of the old key.
	meanwhile := issueUserCertificate(t, "e2e-trust-user-b")
	requireIssuedBy(t, "the certificate approved while Preparing", meanwhile.leaf, olds[userClientCA], nexts[userClientCA])
	// And the kubelet client CA's old key: a node's client certificate,
	// approved in its create (selfnodeclient), is of the old CA too.
	nodeMeanwhile := issueNodeClientCertificate(t, "e2e-trust-node-b", trustNode)
	requireIssuedBy(t, "the node client certificate approved while Preparing", nodeMeanwhile, olds[kubeletClientCA], nexts[kubeletClientCA])

	// Held: trustPropagation passes, and still nothing moves, because
	// kube-apiserver's file does not hold the new CAs. The agent does not
	// renew either (the old key would sign again).
	hold := time.Until(published.Add(trustPropagation + 5*time.Second))
	framework.Stays(t, max(hold, 3*time.Second), "both CAs Preparing while trust-sync is stopped", func(ctx context.Context) error {
		for _, name := range cas {
			ca, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if ca.Status.Phase != rotationv1alpha1.PhasePreparing {
				return fmt.Errorf("%s is %s with no consumer holding the new CA", name, ca.Status.Phase)
			}
		}
		if leaf := current(); leaf == nil || !leaf.Equal(bootstrapCert) {
			return errors.New("the agent renewed while the CA was Preparing")
		}
		return nil
	})

	// trust-sync again: the file gets the new CAs, kube-apiserver reloads
	// it by itself, and only then does each CA reach Prepared.
	ts.start(t)
	prepared := map[string]*rotationv1alpha1.CertificateAuthority{}
	for _, name := range cas {
		prepared[name] = waitCAPhase(t, name, rotationv1alpha1.PhasePrepared)
		ca := prepared[name]
		if got := caCert(t, ca.Status.Current); !got.Equal(nexts[name]) {
			t.Fatalf("%s: Prepared with another current CA than the published next one", name)
		}
		report := ts.report(t, name)
		if report == nil || !slices.Contains(report.Fingerprints, ca.Status.Current.Fingerprint) ||
			report.ReportTime == nil || report.ReportTime.After(ca.Status.LastInitiationFinishedTime.Time) {
			t.Fatalf("%s Prepared at %s; %s's report: %+v", name, ca.Status.LastInitiationFinishedTime, apiServerConsumer, report)
		}
	}
	if held := ts.fileCertificates(t); !containsCert(held, nexts[kubeletClientCA]) || !containsCert(held, nexts[userClientCA]) || !containsCert(held, olds[kubeletClientCA]) {
		t.Fatalf("kube-apiserver's --client-ca-file lacks a CA of the rotation: %d certificates", len(held))
	}

	// The user renews with the new CA; the old certificate keeps working
	// until Complete (its loop runs on).
	userCertC := issueUserCertificate(t, "e2e-trust-user-c")
	requireIssuedBy(t, "the user's renewal after Prepared", userCertC.leaf, nexts[userClientCA], olds[userClientCA])
	userLoopC := startUserLoop(t, userCertC)
	// So does the node that got one meanwhile (it would hold Complete).
	nodeRenewed := issueNodeClientCertificate(t, "e2e-trust-node-c", trustNode)
	requireIssuedBy(t, "the node's renewal after Prepared", nodeRenewed, nexts[kubeletClientCA], olds[kubeletClientCA])

	// The agent renews inside the window, from the new CA.
	finished := prepared[kubeletClientCA].Status.LastInitiationFinishedTime.Time
	const slack = 15 * time.Second
	var renewed *x509.Certificate
	framework.Eventually(t, time.Until(finished.Add(renewalWindow+slack)), "the agent renewing inside the renewal window", func(context.Context) error {
		if renewed = current(); renewed == nil || renewed.Equal(bootstrapCert) {
			return errors.New("the store still holds the bootstrap certificate")
		}
		return nil
	})
	requireIssuedBy(t, "the agent's renewal", renewed, nexts[kubeletClientCA], olds[kubeletClientCA])
	if issued := renewed.NotBefore.Add(signing.Backdate); issued.Before(finished) || issued.After(finished.Add(renewalWindow+slack)) {
		t.Fatalf("the agent's renewal was issued at %s, outside the window from Prepared at %s (%s)", issued, finished, renewalWindow)
	}
	if renewed.Subject.CommonName != "system:node:"+kubeletNode {
		t.Fatalf("renewed subject %v", renewed.Subject)
	}
	// The kubelet uses it before the old CA goes: a lease update with it.
	framework.Eventually(t, 90*time.Second, "a lease update with the renewed certificate", func(context.Context) error {
		if !credentialIDs(t, kubeletNode)[credentialID(renewed)] {
			return fmt.Errorf("no lease update with %s in the audit log", credentialID(renewed))
		}
		return nil
	})

	// Every certificate of the old keys is renewed (the node's, requested
	// with its bootstrap identity, by the node itself): Complete needs no
	// force.
	for _, name := range cas {
		framework.Eventually(t, 30*time.Second, name+": nothing pending renewal", func(ctx context.Context) error {
			ca, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if ca.Status.PendingRenewal != 0 {
				return fmt.Errorf("pendingRenewal %d: %+v", ca.Status.PendingRenewal, ca.Status.PendingRenewals)
			}
			return nil
		})
	}
	// The old user certificate worked all along, up to Complete.
	userLoopA.stop(t)
	rotateAll(t, rotationv1alpha1.RotationComplete, false, rotationv1alpha1.PhaseCompleted, cas...)
	ts.waitHolding(t, cas...)
	held := ts.fileCertificates(t)
	if containsCert(held, olds[kubeletClientCA]) || containsCert(held, olds[userClientCA]) {
		t.Fatal("the old CAs are still in --client-ca-file after Complete")
	}
	// The node carries on with the new CA alone.
	leaseRenewedAfter(t, kubeletNode, time.Now())
	userLoopC.stop(t)
	watchdog.stop(t)

	// A failed authentication has no user in its event (nor in the
	// metric), so no 401 can be put down to another client: every one
	// since the test started counts, the node's (bootstrap user and
	// system:node:NAME) and the kubeconfig user's among them.
	if got := unauthorizedSince(t, testStart); len(got) > 0 {
		t.Fatalf("kube-apiserver answered 401 during the test:\n%s", strings.Join(got, "\n"))
	}
	if n := authenticationFailures(t) - authFailures; n != 0 {
		t.Fatalf("kube-apiserver failed to authenticate %d requests during the test (authentication_attempts)", n)
	}

	// The file trust-sync writes is what kube-apiserver trusts: the old
	// user certificate, dropped with its CA, is refused now.
	framework.Eventually(t, 30*time.Second, "the old user certificate refused after Complete", func(ctx context.Context) error {
		_, err := userCertA.client(t).CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, trustUser, metav1.GetOptions{})
		if !apierrors.IsUnauthorized(err) {
			return fmt.Errorf("got %v, want 401", err)
		}
		return nil
	})
}

// trustSync runs `rekey-agent trust-sync` for kube-apiserver's
// --client-ca-file, as a user bound to the shipped rekey:trust-consumer
// role.
type trustSync struct {
	args []string
	dir  string
	file string
	proc *framework.Process
	runs int
}

func startTrustSync(t *testing.T, cas []string) *trustSync {
	t.Helper()
	const user = "e2e-trust-sync"
	kubeconfig, err := cluster.UserKubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	bind(t, user, "rekey:trust-consumer")
	dir := t.TempDir()
	// The framework's client CA: admin and the other users (trust-sync's
	// own user included) keep authenticating.
	include := filepath.Join(dir, "framework-client-ca.pem")
	if err := os.WriteFile(include, cluster.ClientCA.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &trustSync{dir: dir, file: filepath.Join(cluster.Dir, "pki", "client-ca.crt")}
	s.args = []string{"trust-sync", "--kubeconfig", kubeconfig, "--consumer", apiServerConsumer, "--file", s.file, "--include", include}
	for _, ca := range cas {
		s.args = append(s.args, "--ca", ca)
	}
	t.Cleanup(func() {
		if t.Failed() && s.proc != nil {
			t.Logf("trust-sync log tail:\n%s", s.proc.LogTail(4000))
		}
		s.proc.Stop(10 * time.Second)
		// A consumer left behind would hold every later rotation of the
		// CAs in Preparing.
		err := cluster.RekeyAdmin.RotationV1alpha1().TrustConsumers().Delete(context.Background(), apiServerConsumer, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting TrustConsumer %s: %v", apiServerConsumer, err)
		}
		if t.Failed() {
			finishRotations(t, cas)
		}
	})
	s.start(t)
	s.waitHolding(t, cas...)
	return s
}

func (s *trustSync) start(t *testing.T) {
	t.Helper()
	bin, err := framework.BinaryPath("rekey-agent")
	if err != nil {
		t.Fatal(err)
	}
	s.runs++
	if s.proc, err = framework.Start(s.dir, fmt.Sprintf("trust-sync-%d", s.runs), bin, s.args...); err != nil {
		t.Fatal(err)
	}
}

func (s *trustSync) stop(t *testing.T) {
	t.Helper()
	if !s.proc.Stopped(10 * time.Second) {
		t.Fatalf("trust-sync did not stop on SIGTERM:\n%s", s.proc.LogTail(2000))
	}
}

// report is the consumer's last report on a CA (nil: none).
func (s *trustSync) report(t *testing.T, caName string) *rotationv1alpha1.TrustHeld {
	t.Helper()
	tc, err := cluster.RekeyAdmin.RotationV1alpha1().TrustConsumers().Get(context.Background(), apiServerConsumer, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range tc.Status.Holds {
		if tc.Status.Holds[i].CertificateAuthority == caName {
			return &tc.Status.Holds[i]
		}
	}
	return nil
}

// waitHolding waits until the consumer reports holding exactly the
// certificates of each CA's trust bundle, and the file holds them.
func (s *trustSync) waitHolding(t *testing.T, cas ...string) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, apiServerConsumer+" holding the CAs' trust bundles", func(ctx context.Context) error {
		if s.proc.Exited() {
			return framework.Permanent(fmt.Errorf("trust-sync exited:\n%s", s.proc.LogTail(2000)))
		}
		tc, err := cluster.RekeyAdmin.RotationV1alpha1().TrustConsumers().Get(ctx, apiServerConsumer, metav1.GetOptions{})
		if err != nil {
			return err
		}
		held := s.fileCertificates(t)
		for _, name := range cas {
			ca, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			var want []string
			for _, c := range bundleCertificates(t, ca.Status.TrustBundle) {
				if !containsCert(held, c) {
					return fmt.Errorf("the file lacks a certificate of %s", name)
				}
				want = append(want, signing.Fingerprint(c))
			}
			i := slices.IndexFunc(tc.Status.Holds, func(h rotationv1alpha1.TrustHeld) bool { return h.CertificateAuthority == name })
			if i < 0 {
				return fmt.Errorf("no report on %s: %+v", name, tc.Status.Holds)
			}
			got := slices.Clone(tc.Status.Holds[i].Fingerprints)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				return fmt.Errorf("%s: reported %v, the bundle is %v", name, got, want)
			}
		}
		if !containsCert(held, cluster.ClientCA.Cert) {
			return errors.New("the file lacks the framework's client CA (--include)")
		}
		return nil
	})
}

// fileCertificates are the certificates in kube-apiserver's
// --client-ca-file.
func (s *trustSync) fileCertificates(t *testing.T) []*x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(s.file)
	if err != nil {
		t.Fatal(err)
	}
	return bundleCertificates(t, string(data))
}

func bundleCertificates(t *testing.T, bundle string) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	rest := []byte(bundle)
	for {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return out
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

func containsCert(certs []*x509.Certificate, c *x509.Certificate) bool {
	return slices.ContainsFunc(certs, c.Equal)
}

func caCert(t *testing.T, c *rotationv1alpha1.CACertificate) *x509.Certificate {
	t.Helper()
	if c == nil {
		t.Fatal("no CA certificate in status")
	}
	certs := bundleCertificates(t, c.Certificate)
	if len(certs) != 1 {
		t.Fatalf("%d certificates in a CA certificate of status", len(certs))
	}
	return certs[0]
}

// requireIssuedBy checks that leaf was signed by want, not by other.
func requireIssuedBy(t *testing.T, what string, leaf, want, other *x509.Certificate) {
	t.Helper()
	if err := leaf.CheckSignatureFrom(want); err != nil {
		t.Fatalf("%s is not from the expected CA: %v", what, err)
	}
	if leaf.CheckSignatureFrom(other) == nil {
		t.Fatalf("%s verifies with the other CA too", what)
	}
}

// setRotationPolicy sets spec.rotation of the CAs.
func setRotationPolicy(t *testing.T, propagation, window time.Duration, cas ...string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"rotation":{"trustPropagation":%q,"renewalWindow":%q}}}`, propagation, window)
	for _, name := range cas {
		if _, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("setting spec.rotation of %s: %v", name, err)
		}
	}
}

// restoreRotationPolicy puts spec.rotation of the CAs back when the test
// ends.
func restoreRotationPolicy(t *testing.T, cas ...string) {
	t.Helper()
	for _, name := range cas {
		ca, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		policy, err := json.Marshal(ca.Spec.Rotation)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			patch := fmt.Sprintf(`{"spec":{"rotation":%s}}`, policy)
			if _, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Errorf("restoring spec.rotation of %s: %v", name, err)
			}
		})
	}
}

// rotateAll asks every CA for action, then waits for each to reach phase.
func rotateAll(t *testing.T, action rotationv1alpha1.RotationAction, force bool, phase rotationv1alpha1.RotationPhase, cas ...string) {
	t.Helper()
	for _, name := range cas {
		if _, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Rotate(context.Background(), name, &rotationv1alpha1.Rotation{Action: action, Force: force}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s %s (force %t): %v", action, name, force, err)
		}
	}
	for _, name := range cas {
		waitCAPhase(t, name, phase)
	}
}

// userCertificate is a client certificate of rekey.io/kube-apiserver-client
// for trustUser, with its key.
type userCertificate struct {
	leaf            *x509.Certificate
	certPEM, keyPEM []byte
}

// issueUserCertificate has the admin request (as CSR name) and approve a
// certificate for trustUser. Every one has the same requester and subject:
// a later one renews the earlier ones.
func issueUserCertificate(t *testing.T, name string) *userCertificate {
	t.Helper()
	return issueUserCertificateFor(t, name, trustUser)
}

// issueNodeClientCertificate has the node identity system:node:NODE (in
// system:nodes) create request name through selfnodeclient, which approves
// and signs it in the create, and returns the certificate. Every one for a
// node has the same requester and subject: a later one renews the earlier
// ones.
func issueNodeClientCertificate(t *testing.T, name, node string) *x509.Certificate {
	t.Helper()
	client, _ := userClient(t, "system:node:"+node, "system:nodes")
	csr := nodeCSR(t, name, node)
	var out *certv1alpha1.CertificateSigningRequest
	framework.Eventually(t, settleTimeout, node+" creating "+name+" through selfnodeclient", func(ctx context.Context) error {
		var err error
		out, err = client.CertificatesV1alpha1().CertificateSigningRequests().CreateSelfNodeClient(ctx, name, csr, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// An earlier try was stored and its answer lost.
			out, err = cluster.RekeyAdmin.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		}
		if err == nil && len(out.Status.Certificate) == 0 {
			err = fmt.Errorf("%s has no certificate: %+v", name, out.Status.Conditions)
		}
		return err
	})
	t.Cleanup(func() {
		_ = cluster.RekeyAdmin.CertificatesV1alpha1().CertificateSigningRequests().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	certs := bundleCertificates(t, string(out.Status.Certificate))
	if len(certs) == 0 || certs[0].Subject.CommonName != "system:node:"+node {
		t.Fatalf("%s: certificate %q", name, out.Status.Certificate)
	}
	return certs[0]
}

func (c *userCertificate) client(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{Host: cluster.KubeAPIURL, TLSClientConfig: rest.TLSClientConfig{
		CAData: cluster.ServingCA.CertPEM(), CertData: c.certPEM, KeyData: c.keyPEM,
	}}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// userLoop reads a ConfigMap as trustUser with one certificate, every
// 200ms, until stopped: each failure is kept.
type userLoop struct {
	done     chan struct{}
	finished chan struct{}
	mu       sync.Mutex
	ok       int
	failures []string
}

func startUserLoop(t *testing.T, cert *userCertificate) *userLoop {
	t.Helper()
	ctx := context.Background()
	// The ConfigMap and the user's permission to read it (once).
	if _, err := cluster.Admin.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: trustUser}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	clusterRole(t, "e2e-trust-user-reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{trustUser}, Verbs: []string{"get"}})
	bind(t, trustUser, "e2e-trust-user-reader")
	client := cert.client(t)
	get := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := client.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, trustUser, metav1.GetOptions{})
		return err
	}
	// RBAC reaches kube-apiserver's cache first.
	framework.Eventually(t, settleTimeout, trustUser+" reading its ConfigMap", get)
	l := &userLoop{done: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(l.finished)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-l.done:
				return
			case <-tick.C:
			}
			err := get(ctx)
			l.mu.Lock()
			if err != nil {
				l.failures = append(l.failures, time.Now().Format(time.RFC3339Nano)+": "+err.Error())
			} else {
				l.ok++
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { l.halt() })
	return l
}

func (l *userLoop) halt() {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	<-l.finished
}

// stop ends the loop and fails the test if a request failed.
func (l *userLoop) stop(t *testing.T) {
	t.Helper()
	l.halt()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failures) > 0 {
		t.Fatalf("%d of %d requests of %s failed:\n%s", len(l.failures), len(l.failures)+l.ok, trustUser, strings.Join(l.failures[:min(len(l.failures), 20)], "\n"))
	}
	t.Logf("%d requests of %s, none failed", l.ok, trustUser)
}

// nodeWatchdog samples the Node and its Lease every second: the Node must
// stay Ready and the Lease's renewTime keep advancing.
type nodeWatchdog struct {
	done, finished chan struct{}
	problems       []string
	samples        int
}

// leaseStaleAfter is how old the Lease's renewTime may get: the kubelet
// renews it every 10s (a quarter of its 40s duration).
const leaseStaleAfter = 25 * time.Second

func startNodeWatchdog(t *testing.T, node string) *nodeWatchdog {
	t.Helper()
	w := &nodeWatchdog{done: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(w.finished)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			if p := nodeProblem(node); p != "" {
				w.problems = append(w.problems, time.Now().Format(time.RFC3339)+": "+p)
			}
			w.samples++
		}
	}()
	t.Cleanup(func() { w.halt() })
	return w
}

func nodeProblem(node string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := cluster.Admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	ready := false
	for _, c := range n.Status.Conditions {
		ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	}
	if !ready {
		return fmt.Sprintf("Node not Ready: %+v", n.Status.Conditions)
	}
	lease, err := cluster.Admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	if lease.Spec.RenewTime == nil || time.Since(lease.Spec.RenewTime.Time) > leaseStaleAfter {
		return fmt.Sprintf("Lease not renewed since %v", lease.Spec.RenewTime)
	}
	return ""
}

func (w *nodeWatchdog) halt() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	<-w.finished
}

func (w *nodeWatchdog) stop(t *testing.T) {
	t.Helper()
	w.halt()
	if len(w.problems) > 0 {
		t.Fatalf("the node in %d of %d samples:\n%s", len(w.problems), w.samples, strings.Join(w.problems[:min(len(w.problems), 20)], "\n"))
	}
	t.Logf("the node Ready with a fresh Lease in all %d samples", w.samples)
}

// leaseRenewedAfter waits for the node's Lease to be renewed after t0.
func leaseRenewedAfter(t *testing.T, node string, t0 time.Time) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, "the Lease renewed", func(ctx context.Context) error {
		lease, err := cluster.Admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		// renewTime has microseconds; t0 is truncated to the second to
		// compare with a server clock of the same host.
		if lease.Spec.RenewTime == nil || !lease.Spec.RenewTime.After(t0) {
			return fmt.Errorf("renewed at %v", lease.Spec.RenewTime)
		}
		return nil
	})
}

// unauthorizedSince lists the 401 answers in kube-apiserver's audit log
// from since on. A request that fails authentication has no user in its
// event (kube-apiserver does not know who sent it): what it asked for, its
// source and user agent say whose it was.
func unauthorizedSince(t *testing.T, since time.Time) []string {
	t.Helper()
	f, err := os.Open(kubeAuditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 16<<20)
	for s.Scan() {
		var ev auditv1.Event
		if json.Unmarshal(s.Bytes(), &ev) != nil || ev.ResponseStatus == nil || ev.ResponseStatus.Code != 401 || ev.StageTimestamp.Time.Before(since) {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s %s (user agent %q, user %q)", ev.StageTimestamp.Format(time.RFC3339Nano), ev.Verb, ev.RequestURI, ev.UserAgent, ev.User.Username))
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// authenticationFailures is kube-apiserver's count of requests it failed to
// authenticate (authentication_attempts, results error and failure): every
// 401, whether or not the audit policy records the request.
func authenticationFailures(t *testing.T) int {
	t.Helper()
	body, err := cluster.Admin.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(body), "\n") {
		for _, result := range []string{"error", "failure"} {
			if v, ok := strings.CutPrefix(line, `authentication_attempts{result="`+result+`"} `); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					t.Fatalf("metric line %q: %v", line, err)
				}
				n += int(f)
			}
		}
	}
	return n
}

// finishRotations brings the CAs of a failed run to Completed (with force),
// so that later tests can rotate them: without the consumer a Preparing CA
// reaches Prepared once trustPropagation has passed.
func finishRotations(t *testing.T, cas []string) {
	for _, name := range cas {
		err := framework.EventuallyErr(time.Minute, func(ctx context.Context) error {
			ca, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			switch ca.Status.Phase {
			case rotationv1alpha1.PhaseCompleted:
				return nil
			case rotationv1alpha1.PhasePrepared:
				_, err := cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, name, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete, Force: true}, metav1.CreateOptions{})
				if err == nil {
					err = errors.New("Complete asked for")
				}
				return err
			}
			return fmt.Errorf("phase %s", ca.Status.Phase)
		})
		if err != nil {
			t.Logf("CA %s left unfinished: %v", name, err)
		}
	}
}
