package install

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/controller/publisher"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/test/framework"
)

const (
	pcNamespace = "install-podcert"
	pcCA        = "install-podcert-ca"
	// pcSigner is under rekey.io/, whose sign and attest verbs the shipped
	// RBAC grants rekey (artifacts/deploy/base/rbac.yaml).
	pcSigner      = "rekey.io/install-pods"
	pcTrustDomain = "install.example.org"
	pcAllowedSA   = "cert-user"
	pcDeniedSA    = "not-allowed"
	pcAllowedPod  = "with-cert"
	pcDeniedPod   = "without-cert"
	// pcLifetime is the shortest lifetime kube-apiserver accepts, so that
	// the refresh comes as early as it can.
	pcLifetime = time.Hour
)

// longTests says whether the tests that wait for real time to pass (a
// kubelet's refresh of a pod certificate) run: `make test-long`.
func longTests() bool { return os.Getenv("REKEY_LONG") == "1" }

// TestPodCertificates is issue #30's proof for PodCertificateRequests on a
// real node: with rekey installed in-cluster and a Signer serving the
// PodCertificateRequests of its signer name, a pod with a podCertificate
// projected volume runs, and a probe in it finds the credential bundle's
// key to be its leaf's, the chain to verify against the ClusterTrustBundle
// projected beside it (the one rekey publishes for the signer name) and
// the leaf to carry its service account's SPIFFE ID; a pod whose service
// account the policy does not allow stays not running, its request Denied
// with reason NotAllowed. With REKEY_LONG=1 it also waits for the
// kubelet's refresh at beginRefreshAt (plus its jitter) and requires the
// running pod to see a new certificate without a restart.
func TestPodCertificates(t *testing.T) {
	deploy := filepath.Join(framework.RepoRoot(), "artifacts", "deploy")
	pv := dataVolume(t, "rekey-data-podcert")
	t.Cleanup(func() {
		_, _ = cluster.Kubectl(nil, "delete", "pv", pv, "--ignore-not-found", fmt.Sprintf("--wait=%t", !t.Failed()))
	})
	start := time.Now()
	install(t, deploy)
	// Serving the host cluster's certificate APIs is opt-in.
	hostCluster := filepath.Join(framework.RepoRoot(), "artifacts", "rbac", "host-cluster.yaml")
	kubectl(t, "apply", "-f", hostCluster)
	waitServing(t, 1)
	t.Logf("rekey installed and serving after %s", time.Since(start).Round(time.Second))

	ctx := context.Background()
	kubectl(t, "create", "namespace", pcNamespace)
	t.Cleanup(func() { _, _ = cluster.Kubectl(nil, "delete", "namespace", pcNamespace, "--wait=false") })
	for _, sa := range []string{pcAllowedSA, pcDeniedSA} {
		if _, err := cluster.Admin.CoreV1().ServiceAccounts(pcNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	admin := cluster.RekeyAdmin
	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: pcCA},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{CommonName: "install pod certificates CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256,
			Validity: metav1.Duration{Duration: 24 * time.Hour}, KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd},
			Publish: &rotationv1alpha1.Publish{ClusterTrustBundle: true}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CertificatesV1alpha1().Signers().Create(ctx, &certv1alpha1.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: strings.ReplaceAll(pcSigner, "/", ":")},
		Spec: certv1alpha1.SignerSpec{SignerName: pcSigner, CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: pcCA},
			Policy: certv1alpha1.SignerPolicy{
				AllowedUsages:   []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth, certv1alpha1.UsageServerAuth},
				MaxDuration:     metav1.Duration{Duration: 24 * time.Hour},
				SubjectAltNames: certv1alpha1.SubjectAltNamePolicy{Allowed: []certv1alpha1.SubjectAltNameType{certv1alpha1.SANTypeURI}},
			},
			HostCluster: &certv1alpha1.HostClusterServing{PodCertificateRequests: &certv1alpha1.PodCertificatePolicy{
				Allowed:           []certv1alpha1.PodCertificateSubjects{{Namespace: pcNamespace, ServiceAccounts: []string{pcAllowedSA}}},
				SPIFFETrustDomain: pcTrustDomain,
				KeyTypes:          []certv1alpha1.PodCertificateKeyType{certv1alpha1.PodCertificateKeyECDSAP256},
				Duration:          &metav1.Duration{Duration: pcLifetime},
			}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The pods project the signer's ClusterTrustBundle: the kubelet fails
	// the volume while there is none, so the pods wait for it.
	ctbName := publisher.ClusterTrustBundleName(pcSigner, pcCA)
	var trustBundle string
	framework.Eventually(t, 2*time.Minute, "ClusterTrustBundle "+ctbName, func(ctx context.Context) error {
		ctb, err := cluster.Admin.CertificatesV1().ClusterTrustBundles().Get(ctx, ctbName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ctb.Spec.SignerName != pcSigner {
			return framework.Permanent(fmt.Errorf("ClusterTrustBundle %s has signer %q", ctbName, ctb.Spec.SignerName))
		}
		trustBundle = ctb.Spec.TrustBundle
		return nil
	})

	probe := buildProbe(t)
	created := time.Now()
	for pod, sa := range map[string]string{pcAllowedPod: pcAllowedSA, pcDeniedPod: pcDeniedSA} {
		if _, err := cluster.Admin.CoreV1().Pods(pcNamespace).Create(ctx, certPod(pod, sa, probe), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The allowed pod runs, and its probe verified the credential bundle.
	first := waitVerified(t, pcAllowedPod, 3*time.Minute, "")
	running := waitRunning(t, pcAllowedPod)
	t.Logf("pod %s running; its probe verified serial %s %s after the pod's creation", pcAllowedPod, first.serial,
		first.at.Sub(created).Round(100*time.Millisecond))
	pcr := issuedRequest(t, pcAllowedPod, first.serial)
	leaf := leafOf(t, pcr.Status.CertificateChain)
	if got, want := first.issuer, issuerIn(t, leaf, trustBundle); got != want {
		t.Fatalf("the probe verified with issuer %s, the ClusterTrustBundle's CA is %s", got, want)
	}
	spiffe := spiffeID(pcAllowedSA)
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != spiffe {
		t.Fatalf("the issued leaf's URIs are %v, want [%s]", leaf.URIs, spiffe)
	}
	if key, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || key.Curve != elliptic.P256() {
		t.Fatalf("the leaf's key is a %T, want ECDSA P-256 (the volume's keyType)", leaf.PublicKey)
	}
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
		if !hasExtKeyUsage(leaf, u) {
			t.Fatalf("the leaf's extended key usages %v lack %v (the policy's default usages)", leaf.ExtKeyUsage, u)
		}
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life != pcLifetime {
		t.Fatalf("the leaf lives %s, want the policy's %s", life, pcLifetime)
	}
	t.Logf("request %s: created %s, issued %s later; notBefore %s, beginRefreshAt %s, notAfter %s",
		pcr.Name, pcr.CreationTimestamp.UTC().Format(time.RFC3339), issuedAt(pcr).Sub(pcr.CreationTimestamp.Time),
		pcr.Status.NotBefore.UTC().Format(time.RFC3339), pcr.Status.BeginRefreshAt.UTC().Format(time.RFC3339), pcr.Status.NotAfter.UTC().Format(time.RFC3339))

	// The pod of a service account the policy does not name: its request
	// is Denied, and once the kubelet has seen that (its Denied event on
	// the pod), the pod still does not run.
	denied := waitDenied(t, pcDeniedPod)
	t.Logf("request %s of pod %s Denied (%s: %s)", denied.Name, pcDeniedPod, conditionOf(denied, certificatesv1.PodCertificateRequestConditionTypeDenied).Reason,
		conditionOf(denied, certificatesv1.PodCertificateRequestConditionTypeDenied).Message)
	framework.Eventually(t, 2*time.Minute, "the kubelet's Denied event on pod "+pcDeniedPod, func(ctx context.Context) error {
		events, err := cluster.Admin.CoreV1().Events(pcNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pcDeniedPod + ",reason=Denied"})
		if err != nil {
			return err
		}
		if len(events.Items) == 0 {
			return fmt.Errorf("no Denied event on pod %s", pcDeniedPod)
		}
		return nil
	})
	framework.Stays(t, 15*time.Second, "pod "+pcDeniedPod+" not running", func(ctx context.Context) error {
		pod, err := cluster.Admin.CoreV1().Pods(pcNamespace).Get(ctx, pcDeniedPod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.Status.Phase != corev1.PodPending {
			return fmt.Errorf("phase %s", pod.Status.Phase)
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.State.Running != nil || cs.State.Terminated != nil || cs.RestartCount > 0 {
				return fmt.Errorf("container %s started: %+v", cs.Name, cs.State)
			}
		}
		return nil
	})

	if longTests() {
		t.Run("Refresh", func(t *testing.T) { refreshesInPlace(t, first, running, pcr) })
	} else {
		t.Log("the refresh at beginRefreshAt runs with REKEY_LONG=1 (make test-long)")
	}

	if fails := probeFailures(t, pcAllowedPod); fails != "" {
		t.Fatalf("the probe in pod %s failed a check:\n%s", pcAllowedPod, fails)
	}
	// The pods go before rekey, so that nothing of theirs waits on it.
	if out, err := cluster.Kubectl(nil, "delete", "namespace", pcNamespace, "--wait=true", "--timeout=2m"); err != nil {
		t.Fatalf("deleting namespace %s: %v\n%s", pcNamespace, err, out)
	}
	kubectl(t, "delete", "-f", hostCluster)
	uninstall(t, deploy)
}

// refreshesInPlace waits for the kubelet's refresh of the running pod's
// certificate: it starts at beginRefreshAt plus up to 5 minutes of jitter,
// on the refresh pass that runs every 1 to 2 minutes, and the new
// credential bundle reaches the volume on the pod's next sync. The probe,
// still the same process in the same container, must verify a new
// certificate (another serial) from a new request.
func refreshesInPlace(t *testing.T, first verification, running corev1.ContainerStatus, pcr *certificatesv1.PodCertificateRequest) {
	const jitter, refreshPass, issueAndSync = 5 * time.Minute, 2 * time.Minute, 3 * time.Minute
	begin := pcr.Status.BeginRefreshAt.Time
	wait := time.Until(begin) + jitter + refreshPass + issueAndSync
	t.Logf("beginRefreshAt is %s (%s from now): waiting up to %s for the refresh", begin.UTC().Format(time.RFC3339),
		time.Until(begin).Round(time.Second), wait.Round(time.Second))
	second := waitVerified(t, pcAllowedPod, wait, first.serial)
	t.Logf("the probe verified serial %s at %s: %s after beginRefreshAt (the kubelet's jitter, its refresh pass and the volume's sync)",
		second.serial, second.at.Format(time.RFC3339), second.at.Sub(begin).Round(time.Second))
	if second.at.Before(begin) {
		t.Fatalf("the certificate changed at %s, before beginRefreshAt %s", second.at.Format(time.RFC3339), begin.Format(time.RFC3339))
	}
	refreshed := issuedRequest(t, pcAllowedPod, second.serial)
	if refreshed.Name == pcr.Name {
		t.Fatalf("the new certificate came from the first request %s", pcr.Name)
	}
	if second.issuer != first.issuer {
		t.Fatalf("the refreshed certificate verified with issuer %s, the first with %s", second.issuer, first.issuer)
	}
	now := waitRunning(t, pcAllowedPod)
	if now.RestartCount != 0 || now.ContainerID != running.ContainerID || !now.State.Running.StartedAt.Equal(&running.State.Running.StartedAt) {
		t.Fatalf("the container was restarted: before %s started %s, now %s started %s, %d restarts",
			running.ContainerID, running.State.Running.StartedAt, now.ContainerID, now.State.Running.StartedAt, now.RestartCount)
	}
	t.Logf("request %s issued serial %s; the container %s ran throughout", refreshed.Name, second.serial, now.ContainerID)
}

// certPod is a pod of service account sa whose probe checks a
// podCertificate projected volume of pcSigner beside the signer's
// projected ClusterTrustBundle.
func certPod(name, sa, probeDir string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pcNamespace},
		Spec: corev1.PodSpec{
			ServiceAccountName:            sa,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "probe", Image: "rekey.io/pause:" + imageTag(), ImagePullPolicy: corev1.PullNever,
				Command: []string{"/probe/tlsprobe", "-credential-bundle", "/pod-cert/credentials.pem", "-trust", "/pod-cert/trust.pem", "-spiffe", spiffeID(sa)},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "pod-cert", MountPath: "/pod-cert", ReadOnly: true},
					{Name: "probe", MountPath: "/probe", ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "pod-cert", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{PodCertificate: &corev1.PodCertificateProjection{
						SignerName: pcSigner, KeyType: "ECDSAP256", MaxExpirationSeconds: ptr.To(int32(pcLifetime / time.Second)),
						CredentialBundlePath: "credentials.pem",
					}},
					// An empty selector: every bundle of the signer name
					// (a nil one would select none).
					{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{SignerName: ptr.To(pcSigner), LabelSelector: &metav1.LabelSelector{}, Path: "trust.pem"}},
				}}}},
				{Name: "probe", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: probeDir}}},
			},
		},
	}
}

func spiffeID(sa string) string {
	return "spiffe://" + pcTrustDomain + "/ns/" + pcNamespace + "/sa/" + sa
}

// buildProbe builds tlsprobe (static) into a directory of its own that
// the pods mount from the host (the node has no registry to pull an image
// with it from).
func buildProbe(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(cluster.Dir, "podcert-probe")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "tlsprobe"), "./test/install/tlsprobe")
	build.Dir = framework.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building tlsprobe: %v\n%s", err, out)
	}
	return dir
}

// verification is a VERIFIED line of the probe's log.
type verification struct {
	at             time.Time
	serial, issuer string
}

var verifiedLine = regexp.MustCompile(`^(\S+) VERIFIED serial=(\d+) uri=(\S*) issuer=(\S+) `)

// waitVerified waits for the probe in pod to have verified a certificate
// whose serial is not previous, and returns the last such line.
func waitVerified(t *testing.T, pod string, timeout time.Duration, previous string) verification {
	t.Helper()
	var v verification
	err := framework.EventuallyErr(timeout, func(context.Context) error {
		log := podLog(t, pod)
		for _, line := range strings.Split(log, "\n") {
			m := verifiedLine.FindStringSubmatch(containerLogMessage(line))
			if m == nil || m[2] == previous {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, m[1])
			if err != nil {
				return framework.Permanent(fmt.Errorf("the probe's line %q: %w", line, err))
			}
			if m[3] != spiffeID(pcAllowedSA) {
				return framework.Permanent(fmt.Errorf("the probe verified URI %q", m[3]))
			}
			v = verification{at: at, serial: m[2], issuer: m[4]}
		}
		if v.serial == "" {
			return fmt.Errorf("no certificate verified but serial %q; the probe's log:\n%s", previous, log)
		}
		return nil
	})
	if err != nil {
		describe, _ := cluster.Kubectl(nil, "describe", "pod", "-n", pcNamespace, pod)
		pcrs, _ := cluster.Kubectl(nil, "get", "podcertificaterequests", "-n", pcNamespace, "-o", "yaml")
		t.Fatalf("pod %s: %v\n%s\n%s\nrekey's log:\n%s", pod, err, describe, pcrs, cluster.PodLogs("rekey-apiserver"))
	}
	return v
}

// containerLogMessage is the message of a line of a CRI container log
// ("<time> stdout F <message>").
func containerLogMessage(line string) string {
	f := strings.SplitN(line, " ", 4)
	if len(f) < 4 {
		return ""
	}
	return f[3]
}

// probeFailures are the FAIL lines of the probe's log in pod.
func probeFailures(t *testing.T, pod string) string {
	t.Helper()
	var fails []string
	for _, line := range strings.Split(podLog(t, pod), "\n") {
		// "<stamp> FAIL <error>"
		if f := strings.SplitN(containerLogMessage(line), " ", 3); len(f) == 3 && f[1] == "FAIL" {
			fails = append(fails, line)
		}
	}
	return strings.Join(fails, "\n")
}

// podLog is everything the node kept of the containers' logs of pod in
// pcNamespace (every container instance: a restart would add a file).
func podLog(t *testing.T, pod string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cluster.Node.Dir, "pod-logs", pcNamespace+"_"+pod+"_*", "*", "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}

// waitRunning waits for pod's container to run and returns its status.
func waitRunning(t *testing.T, pod string) corev1.ContainerStatus {
	t.Helper()
	var status corev1.ContainerStatus
	framework.Eventually(t, time.Minute, "pod "+pod+" running", func(ctx context.Context) error {
		p, err := cluster.Admin.CoreV1().Pods(pcNamespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
			return fmt.Errorf("phase %s, containers %+v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		status = p.Status.ContainerStatuses[0]
		return nil
	})
	return status
}

// requestsOf lists the PodCertificateRequests of pod.
func requestsOf(ctx context.Context, pod string) ([]certificatesv1.PodCertificateRequest, error) {
	list, err := cluster.Admin.CertificatesV1().PodCertificateRequests(pcNamespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.podName=" + pod})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// issuedRequest returns pod's request whose issued leaf has serial, and
// checks that kube-apiserver's status fields match the leaf.
func issuedRequest(t *testing.T, pod, serial string) *certificatesv1.PodCertificateRequest {
	t.Helper()
	var found *certificatesv1.PodCertificateRequest
	framework.Eventually(t, 30*time.Second, "the request of pod "+pod+" that issued serial "+serial, func(ctx context.Context) error {
		pcrs, err := requestsOf(ctx, pod)
		if err != nil {
			return err
		}
		var seen []string
		for i := range pcrs {
			pcr := &pcrs[i]
			if conditionOf(pcr, certificatesv1.PodCertificateRequestConditionTypeIssued) == nil {
				seen = append(seen, pcr.Name+" not issued")
				continue
			}
			leaf, err := parseLeaf(pcr.Status.CertificateChain)
			if err != nil {
				return framework.Permanent(fmt.Errorf("request %s: %w", pcr.Name, err))
			}
			if leaf.SerialNumber.String() == serial {
				found = pcr
				return nil
			}
			seen = append(seen, pcr.Name+" serial "+leaf.SerialNumber.String())
		}
		return fmt.Errorf("requests: %v", seen)
	})
	if found.Spec.SignerName != pcSigner || found.Spec.ServiceAccountName != pcAllowedSA {
		t.Fatalf("request %s: signer %s, service account %s", found.Name, found.Spec.SignerName, found.Spec.ServiceAccountName)
	}
	leaf := leafOf(t, found.Status.CertificateChain)
	if !found.Status.NotBefore.Time.Equal(leaf.NotBefore) || !found.Status.NotAfter.Time.Equal(leaf.NotAfter) {
		t.Fatalf("request %s: status notBefore/notAfter %s/%s, the leaf's %s/%s", found.Name, found.Status.NotBefore, found.Status.NotAfter, leaf.NotBefore, leaf.NotAfter)
	}
	return found
}

// waitDenied waits for pod's request to be Denied with reason NotAllowed.
func waitDenied(t *testing.T, pod string) *certificatesv1.PodCertificateRequest {
	t.Helper()
	var found *certificatesv1.PodCertificateRequest
	framework.Eventually(t, 2*time.Minute, "the request of pod "+pod+" Denied", func(ctx context.Context) error {
		pcrs, err := requestsOf(ctx, pod)
		if err != nil {
			return err
		}
		if len(pcrs) != 1 {
			return fmt.Errorf("%d requests", len(pcrs))
		}
		pcr := &pcrs[0]
		if c := conditionOf(pcr, certificatesv1.PodCertificateRequestConditionTypeIssued); c != nil || pcr.Status.CertificateChain != "" {
			return framework.Permanent(fmt.Errorf("request %s was issued", pcr.Name))
		}
		c := conditionOf(pcr, certificatesv1.PodCertificateRequestConditionTypeDenied)
		if c == nil {
			return fmt.Errorf("request %s: conditions %+v", pcr.Name, pcr.Status.Conditions)
		}
		if c.Reason != "NotAllowed" {
			return framework.Permanent(fmt.Errorf("request %s Denied with reason %q (%s), want NotAllowed", pcr.Name, c.Reason, c.Message))
		}
		found = pcr
		return nil
	})
	return found
}

func conditionOf(pcr *certificatesv1.PodCertificateRequest, typ string) *metav1.Condition {
	for i := range pcr.Status.Conditions {
		if c := &pcr.Status.Conditions[i]; c.Type == typ && c.Status == metav1.ConditionTrue {
			return c
		}
	}
	return nil
}

func issuedAt(pcr *certificatesv1.PodCertificateRequest) time.Time {
	if c := conditionOf(pcr, certificatesv1.PodCertificateRequestConditionTypeIssued); c != nil {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

func parseLeaf(chain string) (*x509.Certificate, error) {
	block, _ := pem.Decode([]byte(chain))
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("no certificate in the chain %q", chain)
	}
	return x509.ParseCertificate(block.Bytes)
}

func leafOf(t *testing.T, chain string) *x509.Certificate {
	t.Helper()
	leaf, err := parseLeaf(chain)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// issuerIn returns the fingerprint of the certificate of bundle that
// signed leaf.
func issuerIn(t *testing.T, leaf *x509.Certificate, bundle string) string {
	t.Helper()
	for rest := []byte(bundle); ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			t.Fatalf("no CA of the ClusterTrustBundle signed the leaf (serial %s)", leaf.SerialNumber)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if leaf.CheckSignatureFrom(c) == nil {
			return signing.Fingerprint(c)
		}
	}
}

func hasExtKeyUsage(c *x509.Certificate, u x509.ExtKeyUsage) bool {
	for _, got := range c.ExtKeyUsage {
		if got == u {
			return true
		}
	}
	return false
}

// dataVolume makes an empty hostPath volume, owned by rekey's user, for
// the embedded etcd's claim of artifacts/deploy (the cluster has no
// provisioner), under a name and directory of its own: another install's
// data would be of another key-encryption key.
func dataVolume(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(cluster.Dir, "pv-"+name)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, rekeyUID, rekeyUID); err != nil {
		t.Fatal(err)
	}
	kubectlIn(t, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata:
  name: %s
spec:
  capacity: {storage: 2Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: %s, type: Directory}
`, name, dir), "apply", "-f", "-")
	return name
}
