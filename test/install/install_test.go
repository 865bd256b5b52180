package install

import (
	"bytes"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

const (
	namespace  = "rekey-system"
	podLabel   = "app=rekey-apiserver"
	userSigner = "rekey.io/kube-apiserver-client"
	// rekeyUID is the user of rekey's image and Deployment.
	rekeyUID = 65532
)

// TestInstallDefault: the one command installs a working rekey on its
// embedded etcd; a new pod keeps every object; a pod verifying a
// rekey-issued serving certificate through a published ConfigMap sees no
// failed handshake across a rotation of its CA; the uninstall removes
// everything rekey made.
func TestInstallDefault(t *testing.T) {
	deploy := filepath.Join(framework.RepoRoot(), "artifacts", "deploy")
	pv := persistentVolume(t)
	t.Cleanup(func() {
		// After a failure the claim may still be bound (no uninstall ran):
		// waiting for the volume's deletion would hang until the timeout.
		_, _ = cluster.Kubectl(nil, "delete", "pv", pv, "--ignore-not-found", fmt.Sprintf("--wait=%t", !t.Failed()))
	})

	install(t, deploy)
	first := waitServing(t, 1)
	requireRestricted(t)
	// A CA that publishes its bundle outside rekey's namespace: the
	// uninstall must take that ConfigMap too.
	kubectlIn(t, `apiVersion: rotation.rekey.io/v1alpha1
kind: CertificateAuthority
metadata:
  name: install-published
spec:
  commonName: Install test CA
  keyAlgorithm: ECDSA-P256
  validity: 87600h
  keyStore: {type: Etcd}
  publish:
    configMaps: {namespaces: [default]}
`, "apply", "-f", "-")
	framework.Eventually(t, time.Minute, "the published ConfigMap", func(context.Context) error {
		out, err := cluster.Kubectl(nil, "get", "configmap", "-n", "default", "install-published", "-o", "jsonpath={.metadata.ownerReferences[0].name}")
		if err != nil {
			return err
		}
		if out != "v1alpha1.rotation.rekey.io" {
			return fmt.Errorf("owned by %q", out)
		}
		return nil
	})

	cert := issue(t, "install-before-restart")
	before := snapshot(t)
	kekUID := kubectl(t, "get", "secret", "-n", namespace, "rekey-ca-kek", "-o", "jsonpath={.metadata.uid}")

	deleteWhileWatched(t, first[0])
	second := waitServing(t, 1)
	if second[0] == first[0] {
		t.Fatalf("pod %s was not replaced", first[0])
	}
	if after := snapshot(t); after != before {
		t.Fatalf("objects changed across the pod's restart:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if got := certificateOf(t, "install-before-restart"); got != cert {
		t.Fatal("the issued certificate changed across the restart")
	}
	if got := kubectl(t, "get", "secret", "-n", namespace, "rekey-ca-kek", "-o", "jsonpath={.metadata.uid}"); got != kekUID {
		t.Fatal("the key-encryption key Secret was replaced")
	}
	// The CA keys survived too: the same CA signs after the restart.
	verifyChain(t, issue(t, "install-after-restart"), cert)

	// On this install: a pod trusts a rekey-issued serving certificate
	// through a published ConfigMap across a full rotation (trust_test.go).
	servesThroughRotation(t)

	uninstall(t, deploy)
}

// deleteWhileWatched deletes pod while a watch on rekey's requests is open
// through kube-apiserver (as kube-controller-manager always holds some),
// and requires that the container ended by itself on the kubelet's SIGTERM,
// exit code 0, not by the SIGKILL at the end of the grace period (137),
// and that the watch was ended by the server. How long it took is
// measured, not asserted.
func deleteWhileWatched(t *testing.T, pod string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := cluster.RekeyAdmin.CertificatesV1alpha1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{TimeoutSeconds: ptr.To[int64](600)})
	if err != nil {
		t.Fatalf("opening a watch through kube-apiserver: %v", err)
	}
	defer w.Stop()
	pods, err := cluster.Admin.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod})
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Stop()
	t.Logf("deleting pod %s with a watch open", pod)
	start := time.Now()
	if err := cluster.Admin.CoreV1().Pods(namespace).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var terminated *corev1.ContainerStateTerminated
	watchEnded := time.Duration(0)
	events := w.ResultChan()
	for deleted := false; !deleted; {
		select {
		case ev, ok := <-pods.ResultChan():
			if !ok {
				t.Fatalf("the watch on pod %s ended before its deletion", pod)
			}
			if p, isPod := ev.Object.(*corev1.Pod); isPod {
				for _, cs := range p.Status.ContainerStatuses {
					if cs.Name == "rekey-apiserver" && cs.State.Terminated != nil {
						terminated = cs.State.Terminated
					}
				}
			}
			deleted = ev.Type == watch.Deleted
		case _, ok := <-events:
			if !ok {
				watchEnded, events = time.Since(start), nil
			}
		case <-ctx.Done():
			t.Fatalf("pod %s not gone 2 minutes after its deletion", pod)
		}
	}
	if terminated == nil {
		t.Fatalf("pod %s went without a terminated state for its container", pod)
	}
	t.Logf("pod %s: container ended %s after the delete (exit code %d, %s); the watch through kube-apiserver ended after %s; pod gone after %s",
		pod, terminated.FinishedAt.Sub(start).Round(time.Second), terminated.ExitCode, terminated.Reason, watchEnded.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if terminated.ExitCode != 0 {
		t.Fatalf("rekey-apiserver did not exit cleanly on SIGTERM with a watch open: exit code %d (%s; 137 is the kubelet's SIGKILL)", terminated.ExitCode, terminated.Reason)
	}
	if events != nil {
		t.Fatal("the watch through kube-apiserver was still open after the pod was gone")
	}
}

// TestInstallHA: the ha overlay on an external etcd with TLS client
// certificates, two replicas; one pod is killed while requests are being
// approved and signed, and every request ends issued.
func TestInstallHA(t *testing.T) {
	etcdURL, secret := startTLSEtcd(t)
	overlay := t.TempDir()
	// kustomize takes only a relative path to another kustomization.
	ha, err := filepath.Rel(overlay, filepath.Join(framework.RepoRoot(), "artifacts", "deploy", "overlays", "ha"))
	if err != nil {
		t.Fatal(err)
	}
	// The operator's edit of overlays/ha: where etcd is.
	writeFile(t, filepath.Join(overlay, "kustomization.yaml"), fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
configMapGenerator:
- name: rekey-etcd
  namespace: rekey-system
  behavior: replace
  literals:
  - servers=%s
`, ha, etcdURL))

	kubectl(t, "create", "namespace", namespace)
	kubectl(t, "create", "secret", "generic", "rekey-etcd-client", "-n", namespace,
		"--from-file=ca.crt="+secret+"/ca.crt", "--from-file=tls.crt="+secret+"/tls.crt", "--from-file=tls.key="+secret+"/tls.key")
	install(t, overlay)
	pods := waitServing(t, 2)
	requireRestricted(t)
	issue(t, "ha-kubectl")

	const requests = 60
	var issued, retries atomic.Int32
	var wg sync.WaitGroup
	names := make(chan string)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				retries.Add(createAndApprove(t, name))
				issued.Add(1)
			}
		}()
	}
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		if err := framework.EventuallyErr(5*time.Minute, func(context.Context) error {
			if n := issued.Load(); n < requests/4 {
				return fmt.Errorf("%d approvals", n)
			}
			return nil
		}); err != nil {
			t.Errorf("no quarter of the requests approved to kill a pod after: %v", err)
			return
		}
		t.Logf("killing rekey-apiserver in pod %s after %d approvals", pods[0], issued.Load())
		if err := killContainer(pods[0]); err != nil {
			t.Errorf("killing %s: %v", pods[0], err)
		}
	}()
	for i := 0; i < requests; i++ {
		names <- fmt.Sprintf("ha-%02d", i)
	}
	close(names)
	wg.Wait()
	<-killed

	// Every request ends issued, each with its own certificate from the
	// same CA; the approvals that were cut short were repeated by the
	// client, and what a dead replica left approved the survivor finishes.
	var first string
	serials := map[string]bool{}
	for i := 0; i < requests; i++ {
		name := fmt.Sprintf("ha-%02d", i)
		cert := waitCertificate(t, name)
		if first == "" {
			first = cert
		}
		serials[verifyChain(t, cert, first)] = true
	}
	if len(serials) != requests {
		t.Fatalf("%d distinct certificates for %d requests", len(serials), requests)
	}
	t.Logf("%d requests issued; %d attempts failed while the pod died and were repeated", requests, retries.Load())
	if restarts := kubectl(t, "get", "pod", "-n", namespace, pods[0], "-o", "jsonpath={.status.containerStatuses[0].restartCount}"); restarts == "0" {
		t.Fatalf("pod %s was not killed (no restart)", pods[0])
	}
	waitServing(t, 2)
	uninstall(t, overlay)
}

// killContainer sends SIGKILL to the rekey-apiserver process of a pod, as
// a crash or the OOM killer would: no graceful shutdown, requests in
// flight cut. The process is found by the pod's cgroup on this node.
func killContainer(pod string) error {
	uid, err := cluster.Kubectl(nil, "get", "pod", "-n", namespace, pod, "-o", "jsonpath={.metadata.uid}")
	if err != nil {
		return err
	}
	procs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return err
	}
	killed := 0
	for _, p := range procs {
		comm, err1 := os.ReadFile(filepath.Join(p, "comm"))
		cgroup, err2 := os.ReadFile(filepath.Join(p, "cgroup"))
		if err1 != nil || err2 != nil || strings.TrimSpace(string(comm)) != "rekey-apiserver" || !strings.Contains(string(cgroup), "pod"+strings.TrimSpace(uid)) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil {
			return err
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return err
		}
		killed++
	}
	if killed != 1 {
		return fmt.Errorf("found %d rekey-apiserver processes of pod %s (uid %s)", killed, pod, uid)
	}
	return nil
}

// createAndApprove creates a request and approves it through the
// aggregator, repeating what fails while a replica dies: a create that
// finds its request, or an approval that finds it approved, is done. It
// returns how many attempts failed.
func createAndApprove(t *testing.T, name string) int32 {
	client := cluster.RekeyAdmin.CertificatesV1alpha1().CertificateSigningRequests()
	csr := &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request:           fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: name}),
			SignerName:        userSigner,
			ExpirationSeconds: ptr.To[int32](3600),
			Usages:            []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth},
		},
	}
	failed := int32(-1)
	err := framework.EventuallyErr(2*time.Minute, func(context.Context) error {
		failed++
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return func() error {
			got, err := client.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				got, err = client.Create(ctx, csr, metav1.CreateOptions{})
			}
			if err != nil {
				return err
			}
			for _, c := range got.Status.Conditions {
				if c.Type == certv1alpha1.CertificateApproved {
					return nil
				}
			}
			got.Status.Conditions = append(got.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
				Type: certv1alpha1.CertificateApproved, Status: metav1.ConditionTrue, Reason: "InstallTest", Message: "approved by the install test",
			})
			_, err = client.UpdateApproval(ctx, name, got, metav1.UpdateOptions{})
			return err
		}()
	})
	if err != nil {
		t.Errorf("%s: %v", name, err) // not Fatal: this runs on a worker goroutine
	}
	return failed
}

// waitServing waits until n rekey pods are Ready and both APIServices are
// Available, and returns the pods' names.
func waitServing(t *testing.T, n int) []string {
	t.Helper()
	var pods []string
	err := framework.EventuallyErr(4*time.Minute, func(context.Context) error {
		out, err := cluster.Kubectl(nil, "get", "pods", "-n", namespace, "-l", podLabel, "-o",
			`jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		pods = nil
		ready := 0
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && f[1] == "True" { // no deletionTimestamp
				ready++
				pods = append(pods, f[0])
			}
		}
		available := 0
		for _, name := range framework.APIServiceNames {
			s, _ := cluster.Kubectl(nil, "get", "apiservice", name, "-o", `jsonpath={.status.conditions[?(@.type=="Available")].status}`)
			if strings.TrimSpace(s) == "True" {
				available++
			}
		}
		if err == nil && ready == n && len(strings.Split(strings.TrimSpace(out), "\n")) == n && available == len(framework.APIServiceNames) {
			return nil
		}
		return fmt.Errorf("pods (%v):\n%s\n%d of %d APIServices Available", err, out, available, len(framework.APIServiceNames))
	})
	if err != nil {
		describe, _ := cluster.Kubectl(nil, "describe", "pods", "-n", namespace, "-l", podLabel)
		apis, _ := cluster.Kubectl(nil, "get", "apiservices", "-o", "wide")
		t.Fatalf("rekey not serving with %d pods: %v\n%s\n%s\n%s\n%s", n, err, describe, apis, cluster.PodLogs("rekey-apiserver"), cluster.Diagnose(namespace))
	}
	sort.Strings(pods)
	return pods
}

// requireRestricted: the namespace enforces the restricted Pod Security
// Standard (so the running pods were admitted under it), and a server-side
// check of that level against the running pods warns of nothing.
func requireRestricted(t *testing.T) {
	t.Helper()
	if got := kubectl(t, "get", "namespace", namespace, "-o", `jsonpath={.metadata.labels.pod-security\.kubernetes\.io/enforce}`); got != "restricted" {
		t.Fatalf("namespace %s enforces %q, want restricted", namespace, got)
	}
	if warnings := restrictedWarnings(t, namespace); warnings != "" {
		t.Fatalf("the running pods do not pass the restricted standard:\n%s", warnings)
	}
}

// pinnedPodSecurityVersion is the Pod Security Standards version the
// check pins: the Kubernetes minor the install test runs.
const pinnedPodSecurityVersion = "v1.37"

// restrictedWarnings has kube-apiserver check the pods of ns against the
// restricted standard and returns what it warns of. Pod Security checks a
// namespace's pods only on an update that changes the enforced level or
// version: relabelling with the values the namespace has makes kubectl
// send nothing and the server check nothing. So the server-side dry run
// changes the version, to the pinned one (or to latest where the
// namespace is pinned to it already).
func restrictedWarnings(t *testing.T, ns string) string {
	t.Helper()
	version := pinnedPodSecurityVersion
	if kubectl(t, "get", "namespace", ns, "-o", `jsonpath={.metadata.labels.pod-security\.kubernetes\.io/enforce-version}`) == version {
		version = "latest"
	}
	_, stderr, err := framework.RunKubectl(t, cluster.AdminKubeconfig, nil, "label", "--dry-run=server", "--overwrite", "namespace", ns,
		"pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version="+version)
	if err != nil {
		t.Fatalf("checking the pods of %s against the restricted standard: %v\n%s", ns, err, stderr)
	}
	return strings.TrimSpace(stderr)
}

// TestPodSecurityCheckSeesANonCompliantPod: the check requireRestricted
// makes reports a pod that breaks the restricted standard (a container
// with no securityContext), in a namespace labelled as rekey's is. The pod
// is bound to no node: it never runs, it only has to exist.
func TestPodSecurityCheckSeesANonCompliantPod(t *testing.T) {
	const ns, pod = "install-psa-check", "breaks-restricted"
	kubectl(t, "create", "namespace", ns)
	t.Cleanup(func() { _, _ = cluster.Kubectl(nil, "delete", "namespace", ns, "--wait=false") })
	// Created before the namespace enforces anything (the default
	// ServiceAccount may take a moment to appear).
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  nodeName: no-such-node
  automountServiceAccountToken: false
  containers:
  - name: c
    image: rekey.io/pause:%s
`, pod, ns, imageTag())
	framework.Eventually(t, time.Minute, "the non-compliant pod created", func(context.Context) error {
		_, err := cluster.Kubectl([]byte(manifest), "apply", "-f", "-")
		return err
	})
	// Labelled as artifacts/deploy labels rekey's namespace (kube-apiserver
	// warns and allows).
	kubectl(t, "label", "--overwrite", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest")

	// kube-apiserver evaluates the pods it has seen through its informer.
	framework.Eventually(t, 30*time.Second, "the check reporting the non-compliant pod", func(context.Context) error {
		warnings := restrictedWarnings(t, ns)
		if !strings.Contains(warnings, pod+": ") || !strings.Contains(warnings, "allowPrivilegeEscalation != false") {
			return fmt.Errorf("warnings: %q", warnings)
		}
		t.Logf("the check reports:\n%s", warnings)
		return nil
	})
}

// issue creates a request with kubectl through the aggregator, approves it
// with kubectl rekey approve, and returns the certificate.
func issue(t *testing.T, name string) string {
	t.Helper()
	manifest := fmt.Sprintf(`apiVersion: certificates.rekey.io/v1alpha1
kind: CertificateSigningRequest
metadata:
  name: %s
spec:
  signerName: %s
  expirationSeconds: 3600
  usages: [digital signature, client auth]
  request: %s
`, name, userSigner, base64.StdEncoding.EncodeToString(fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: name})))
	if out, err := cluster.Kubectl([]byte(manifest), "create", "-f", "-"); err != nil {
		t.Fatalf("kubectl create: %v\n%s", err, out)
	}
	plugin := framework.Binary(t, "kubectl-rekey")
	env := []string{"PATH=" + filepath.Dir(plugin) + string(os.PathListSeparator) + os.Getenv("PATH")}
	if out, stderr, err := framework.RunKubectlWithEnv(t, cluster.AdminKubeconfig, env, nil, "rekey", "approve", name); err != nil {
		t.Fatalf("kubectl rekey approve: %v\n%s%s", err, out, stderr)
	}
	return waitCertificate(t, name)
}

func waitCertificate(t *testing.T, name string) string {
	t.Helper()
	var cert string
	framework.Eventually(t, 2*time.Minute, name+" issued", func(ctx context.Context) error {
		csr, err := cluster.RekeyAdmin.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cert = string(csr.Status.Certificate); cert == "" {
			return fmt.Errorf("no certificate: %+v", csr.Status)
		}
		return nil
	})
	return cert
}

func certificateOf(t *testing.T, name string) string {
	t.Helper()
	csr, err := cluster.RekeyAdmin.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(csr.Status.Certificate)
}

// verifyChain checks that cert was signed by the CA that signed other
// (both issued by the same signer) and returns cert's serial.
func verifyChain(t *testing.T, certPEM, otherPEM string) string {
	t.Helper()
	cert, other := parseFirst(t, certPEM), parseFirst(t, otherPEM)
	if !bytes.Equal(cert.AuthorityKeyId, other.AuthorityKeyId) || len(cert.AuthorityKeyId) == 0 {
		t.Fatalf("certificates from different CAs: %x vs %x", cert.AuthorityKeyId, other.AuthorityKeyId)
	}
	return cert.SerialNumber.String()
}

func parseFirst(t *testing.T, certPEM string) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode([]byte(certPEM))
	if block == nil {
		t.Fatalf("no PEM in %q", certPEM)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// snapshot lists rekey's objects (name and UID) as served through the
// aggregator.
func snapshot(t *testing.T) string {
	t.Helper()
	return kubectl(t, "get", "certificatesigningrequests.certificates.rekey.io,signers.certificates.rekey.io,certificateauthorities.rotation.rekey.io",
		"-o", "custom-columns=KIND:.kind,NAME:.metadata.name,UID:.metadata.uid,RV:.metadata.resourceVersion", "--sort-by=.metadata.name", "--no-headers")
}

// install applies kustomization dir. When the test fails before its own
// uninstall, a cleanup deletes what it applied, so that the tests after it
// start on a cluster without rekey: a stuck pod of one test must not be
// what the next three wait on.
func install(t *testing.T, dir string) {
	t.Helper()
	kubectl(t, "apply", "-k", dir)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if out, err := cluster.Kubectl(nil, "delete", "-k", dir, "--ignore-not-found", "--wait=true", "--timeout=3m"); err != nil {
			t.Logf("after the failure, kubectl delete -k %s: %v\n%s", dir, err, out)
		}
	})
}

// uninstall deletes what kustomization dir installed and checks nothing
// rekey made is left: its namespace (and the Secret, PVC and events in
// it), its APIServices, cluster roles and bindings, and any trust bundle it
// published.
func uninstall(t *testing.T, dir string) {
	t.Helper()
	if out, err := cluster.Kubectl(nil, "delete", "-k", dir, "--wait=true", "--timeout=3m"); err != nil {
		t.Fatalf("kubectl delete -k %s: %v\n%s", dir, err, out)
	}
	left := func() string {
		var found []string
		if out, _ := cluster.Kubectl(nil, "get", "namespace", namespace, "--ignore-not-found", "-o", "name"); strings.TrimSpace(out) != "" {
			found = append(found, out)
		}
		for _, kind := range []string{"apiservices", "clusterroles", "clusterrolebindings"} {
			out, _ := cluster.Kubectl(nil, "get", kind, "-o", "name")
			for _, line := range strings.Fields(out) {
				if strings.Contains(line, "rekey") {
					found = append(found, line)
				}
			}
		}
		out, _ := cluster.Kubectl(nil, "get", "rolebindings,roles", "-n", "kube-system", "-o", "name")
		for _, line := range strings.Fields(out) {
			if strings.Contains(line, "rekey") {
				found = append(found, line)
			}
		}
		for _, kind := range []string{"configmaps", "clustertrustbundles"} {
			out, _ := cluster.Kubectl(nil, "get", kind, "-A", "-l", "rekey.io/certificate-authority", "-o", "name")
			found = append(found, strings.Fields(out)...)
		}
		return strings.Join(found, "\n")
	}
	framework.Eventually(t, 2*time.Minute, "nothing of rekey's left after kubectl delete -k", func(context.Context) error {
		if l := left(); l != "" {
			return fmt.Errorf("left:\n%s", l)
		}
		return nil
	})
}

// persistentVolume makes a hostPath volume for the embedded etcd's claim,
// owned by rekey's user (a hostPath volume ignores fsGroup); the cluster
// has no provisioner.
func persistentVolume(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(cluster.Dir, "pv-rekey-data")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, rekeyUID, rekeyUID); err != nil {
		t.Fatal(err)
	}
	name := "rekey-data-install-test"
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

// startTLSEtcd runs an etcd on the host's address that accepts only
// clients with a certificate of its CA, and writes the files of the
// rekey-etcd-client Secret; it returns the client URL and that directory.
func startTLSEtcd(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA("install-etcd-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue(&x509.Certificate{
		Subject: pkix.Name{CommonName: "etcd"}, IPAddresses: []net.IP{net.ParseIP(cluster.HostIP), net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue(&x509.Certificate{
		Subject: pkix.Name{CommonName: "rekey-apiserver"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, kp := range map[string]*pki.KeyPair{"server": server, "tls": client} {
		if err := kp.Write(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "ca.crt"), string(ca.CertPEM()))
	ports, err := framework.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + net.JoinHostPort(cluster.HostIP, strconv.Itoa(ports[0]))
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	tools, err := framework.BuildTools("etcd")
	if err != nil {
		t.Fatal(err)
	}
	proc, err := framework.Start(dir, "etcd-tls", filepath.Join(tools, "etcd"),
		"--name=install", "--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls="+url, "--advertise-client-urls="+url,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=install="+peer,
		"--cert-file="+filepath.Join(dir, "server.crt"), "--key-file="+filepath.Join(dir, "server.key"),
		"--trusted-ca-file="+filepath.Join(dir, "ca.crt"), "--client-cert-auth", "--log-level=warn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Stop(10 * time.Second) })
	return url, dir
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := cluster.Kubectl(nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

func kubectlIn(t *testing.T, stdin string, args ...string) {
	t.Helper()
	if _, err := cluster.Kubectl([]byte(stdin), args...); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
