package install

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/controller/publisher"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

const (
	trustNamespace = "install-trust"
	trustCA        = "install-trust-ca"
	trustSigner    = "install.example.com/serving"
	serverName     = "trust-server.install.example.com"
	probePod       = "tls-probe"
)

// servesThroughRotation is issue #29's proof for pods that trust a
// rekey-issued serving certificate through a ConfigMap the CA publishes:
// a pod (tlsprobe) verifies, with the ConfigMap mounted as a volume, a
// TLS server whose certificate a rekey signer issued, handshake after
// handshake, through a full rotation of the CA (Start, Prepared, the
// server renews, Complete) without one failure. The CA keeps the default
// spec.rotation.trustPropagation (2m), which must outlast the kubelet's
// refresh of ConfigMap volumes (a pod sync, every minute plus up to half
// a minute of jitter): the test sees the new CA in the pod's mounted file
// before the CA reaches Prepared, and only then does the server renew.
//
// It runs inside TestInstallDefault, on the rekey that test installed, to
// share the install and uninstall (and it checks the uninstall removes
// the ConfigMap published here).
func servesThroughRotation(t *testing.T) {
	ctx := context.Background()
	admin := cluster.RekeyAdmin
	kubectl(t, "create", "namespace", trustNamespace)
	t.Cleanup(func() { _, _ = cluster.Kubectl(nil, "delete", "namespace", trustNamespace, "--wait=false") })
	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: trustCA},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{CommonName: "install trust CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256,
			Validity: metav1.Duration{Duration: 24 * time.Hour}, KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd},
			Publish: &rotationv1alpha1.Publish{ConfigMaps: &rotationv1alpha1.ConfigMapPublish{Namespaces: []string{trustNamespace}}},
			// The default trustPropagation (2m) on purpose; the server
			// renews when the test says, so no renewal window is needed.
			Rotation: &rotationv1alpha1.RotationPolicy{RenewalWindow: &metav1.Duration{}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CertificatesV1alpha1().Signers().Create(ctx, &certv1alpha1.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: strings.Replace(trustSigner, "/", ":", 1)},
		Spec: certv1alpha1.SignerSpec{SignerName: trustSigner, CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: trustCA},
			Policy: certv1alpha1.SignerPolicy{
				AllowedUsages:   []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageServerAuth},
				MaxDuration:     metav1.Duration{Duration: 24 * time.Hour},
				SubjectAltNames: certv1alpha1.SubjectAltNamePolicy{Allowed: []certv1alpha1.SubjectAltNameType{certv1alpha1.SANTypeDNS}, RequireDNSOrIP: true},
			}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca := waitTrustCA(t, "bound", func(ca *rotationv1alpha1.CertificateAuthority) bool { return ca.Status.Current != nil })
	oldCA := ca.Status.Current.Fingerprint

	server := startTLSServer(t, issueServing(t, "trust-server-1"))
	startProbe(t, server.addr)
	// The probe's first handshakes: the pod runs and reaches the server.
	framework.Eventually(t, 2*time.Minute, "the probe's first good handshakes", func(context.Context) error {
		if n := server.succeeded(); n < 5 {
			return fmt.Errorf("%d good handshakes; pod log:\n%s", n, probeLog(t))
		}
		return nil
	})
	mounted := mountedBundle(t)

	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, trustCA, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca = waitTrustCA(t, "Preparing with the next CA", func(ca *rotationv1alpha1.CertificateAuthority) bool {
		return ca.Status.Phase == rotationv1alpha1.PhasePreparing && ca.Status.Next != nil
	})
	newCA := ca.Status.Next.Fingerprint
	// The kubelet puts the bundle with the new CA into the pod's volume
	// while the old CA still signs: the CA is not Prepared before.
	var seen time.Time
	framework.Eventually(t, 3*time.Minute, "the new CA in the pod's mounted bundle", func(ctx context.Context) error {
		held := mounted()
		if !strings.Contains(held, newCA) {
			return fmt.Errorf("the mounted bundle is %s", held)
		}
		seen = time.Now()
		ca, err := admin.RotationV1alpha1().CertificateAuthorities().Get(ctx, trustCA, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ca.Status.Phase != rotationv1alpha1.PhasePreparing {
			return framework.Permanent(fmt.Errorf("the CA was %s before the pod's volume held the new CA", ca.Status.Phase))
		}
		return nil
	})
	ca = waitTrustCA(t, "Prepared", func(ca *rotationv1alpha1.CertificateAuthority) bool {
		return ca.Status.Phase == rotationv1alpha1.PhasePrepared
	})
	t.Logf("rotation started %s, the pod's volume held the new CA %s later, Prepared %s after the start",
		ca.Status.LastInitiationTime.Format(time.RFC3339), seen.Sub(ca.Status.LastInitiationTime.Time).Round(time.Second),
		ca.Status.LastInitiationFinishedTime.Sub(ca.Status.LastInitiationTime.Time))
	if ca.Status.Current.Fingerprint != newCA {
		t.Fatalf("Prepared with current %s, want the published next %s", ca.Status.Current.Fingerprint, newCA)
	}

	// The server renews from the new CA; the probe verifies it.
	renewed := issueServing(t, "trust-server-2")
	if fingerprintOf(t, issuerOf(t, renewed, ca.Status.TrustBundle)) != newCA {
		t.Fatal("the renewal after Prepared is not from the new CA")
	}
	before := server.succeeded()
	server.serve(renewed)
	framework.Eventually(t, 30*time.Second, "good handshakes with the renewed certificate", func(context.Context) error {
		if n := server.succeededWith(renewed); n < 5 {
			return fmt.Errorf("%d", n)
		}
		return nil
	})

	// Nothing else holds a certificate of the old CA: Complete needs no
	// force.
	framework.Eventually(t, 30*time.Second, "nothing pending renewal", func(ctx context.Context) error {
		ca, err := admin.RotationV1alpha1().CertificateAuthorities().Get(ctx, trustCA, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ca.Status.PendingRenewal != 0 {
			return fmt.Errorf("pendingRenewal %d: %+v", ca.Status.PendingRenewal, ca.Status.PendingRenewals)
		}
		return nil
	})
	if _, err := admin.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, trustCA, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca = waitTrustCA(t, "Completed", func(ca *rotationv1alpha1.CertificateAuthority) bool {
		return ca.Status.Phase == rotationv1alpha1.PhaseCompleted
	})
	if len(bundleFingerprints(t, ca.Status.TrustBundle)) != 1 {
		t.Fatalf("Completed with %d CAs in the bundle", len(bundleFingerprints(t, ca.Status.TrustBundle)))
	}
	atComplete := server.succeeded()
	framework.Eventually(t, 30*time.Second, "good handshakes after Complete", func(context.Context) error {
		if n := server.succeeded() - atComplete; n < 10 {
			return fmt.Errorf("%d", n)
		}
		return nil
	})

	logs := probeLog(t)
	if failed := server.failed(); len(failed) > 0 || strings.Contains(logs, " FAIL ") {
		t.Fatalf("failed handshakes during the rotation: server side:\n%s\npod log:\n%s", strings.Join(failed, "\n"), logs)
	}
	if !strings.Contains(logs, oldCA) || !strings.Contains(logs, newCA) {
		t.Fatalf("the pod's log does not show both CAs in its bundle:\n%s", logs)
	}
	t.Logf("%d good handshakes, %d with the renewed certificate, none failed", server.succeeded(), server.succeeded()-before)
}

// waitTrustCA waits until the CA is as ok wants it and returns it.
func waitTrustCA(t *testing.T, what string, ok func(*rotationv1alpha1.CertificateAuthority) bool) *rotationv1alpha1.CertificateAuthority {
	t.Helper()
	var ca *rotationv1alpha1.CertificateAuthority
	framework.Eventually(t, 3*time.Minute, "CA "+trustCA+" "+what, func(ctx context.Context) error {
		var err error
		if ca, err = cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(ctx, trustCA, metav1.GetOptions{}); err != nil {
			return err
		}
		if !ok(ca) {
			return fmt.Errorf("phase %q, conditions %+v", ca.Status.Phase, ca.Status.Conditions)
		}
		return nil
	})
	return ca
}

// issueServing has the admin request and approve a serving certificate
// for serverName and returns it with its key.
func issueServing(t *testing.T, name string) *tls.Certificate {
	t.Helper()
	key := fixtures.NewKey(t)
	csrs := cluster.RekeyAdmin.CertificatesV1alpha1().CertificateSigningRequests()
	csr, err := csrs.Create(context.Background(), &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request:           fixtures.CSRPEMWithKey(t, key, fixtures.CSROptions{CommonName: serverName, DNSNames: []string{serverName}}),
			SignerName:        trustSigner,
			ExpirationSeconds: ptr.To[int32](3600),
			Usages:            []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageServerAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
		Type: certv1alpha1.CertificateApproved, Status: metav1.ConditionTrue, Reason: "InstallTest", Message: "approved by the install test",
	})
	if _, err := csrs.UpdateApproval(context.Background(), name, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	certPEM := waitCertificate(t, name)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair([]byte(certPEM), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return &pair
}

// tlsServer completes TLS handshakes on the host's address, where pods
// reach it, with the certificate it is given, and counts them per
// certificate; a handshake the client aborts (it could not verify the
// certificate) is a failure.
type tlsServer struct {
	addr     string
	mu       sync.Mutex
	cert     *tls.Certificate
	good     map[*tls.Certificate]int
	failures []string
}

func startTLSServer(t *testing.T, cert *tls.Certificate) *tlsServer {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(cluster.HostIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := &tlsServer{addr: ln.Addr().String(), cert: cert, good: map[*tls.Certificate]int{}}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.cert, nil
	}}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go s.handshake(tls.Server(conn, cfg))
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return s
}

func (s *tlsServer) handshake(conn *tls.Conn) {
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	s.mu.Lock()
	cert := s.cert
	s.mu.Unlock()
	err := conn.Handshake()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.failures = append(s.failures, time.Now().UTC().Format(time.RFC3339Nano)+" "+err.Error())
		return
	}
	s.good[cert]++
}

func (s *tlsServer) serve(cert *tls.Certificate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cert = cert
}

func (s *tlsServer) succeeded() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.good {
		n += c
	}
	return n
}

func (s *tlsServer) succeededWith(cert *tls.Certificate) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.good[cert]
}

func (s *tlsServer) failed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.failures...)
}

// startProbe builds tlsprobe (static) and runs it in a pod of the pause
// image (an empty image with one static binary: the node has no registry
// to pull from), from a hostPath volume, with the CA's published
// ConfigMap mounted at /trust.
func startProbe(t *testing.T, addr string) {
	t.Helper()
	dir := filepath.Join(cluster.Dir, "tlsprobe")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "tlsprobe"), "./test/install/tlsprobe")
	build.Dir = framework.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building tlsprobe: %v\n%s", err, out)
	}
	framework.Eventually(t, time.Minute, "the published ConfigMap", func(ctx context.Context) error {
		_, err := cluster.Admin.CoreV1().ConfigMaps(trustNamespace).Get(ctx, trustCA, metav1.GetOptions{})
		return err
	})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: probePod, Namespace: trustNamespace},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "probe", Image: "rekey.io/pause:" + imageTag(), ImagePullPolicy: corev1.PullNever,
				Command: []string{"/probe/tlsprobe", "-addr", addr, "-server-name", serverName, "-ca", "/trust/" + publisher.BundleKey},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "trust", MountPath: "/trust", ReadOnly: true},
					{Name: "probe", MountPath: "/probe", ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "trust", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: trustCA}}}},
				{Name: "probe", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}},
			},
		},
	}
	// The namespace's default ServiceAccount may take a moment to appear.
	framework.Eventually(t, time.Minute, "the probe pod created", func(ctx context.Context) error {
		_, err := cluster.Admin.CoreV1().Pods(trustNamespace).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
}

// mountedBundle returns a function that reads the pod's mounted bundle
// on the node (the kubelet's copy of the ConfigMap, as the pod sees it)
// and describes it by the fingerprints of its certificates.
func mountedBundle(t *testing.T) func() string {
	t.Helper()
	pod, err := cluster.Admin.CoreV1().Pods(trustNamespace).Get(context.Background(), probePod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cluster.Node.Dir, "kubelet", "pods", string(pod.UID), "volumes", "kubernetes.io~configmap", "trust", publisher.BundleKey)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the pod's mounted bundle: %v", err)
	}
	return func() string {
		data, err := os.ReadFile(path)
		if err != nil {
			return err.Error()
		}
		return strings.Join(bundleFingerprints(t, string(data)), ",")
	}
}

func bundleFingerprints(t *testing.T, bundle string) []string {
	t.Helper()
	var out []string
	for rest := []byte(bundle); ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return out
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, signing.Fingerprint(c))
	}
}

func fingerprintOf(t *testing.T, c *x509.Certificate) string {
	t.Helper()
	return signing.Fingerprint(c)
}

// issuerOf returns the certificate of bundle that signed pair's leaf.
func issuerOf(t *testing.T, pair *tls.Certificate, bundle string) *x509.Certificate {
	t.Helper()
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for rest := []byte(bundle); ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			t.Fatal("no CA of the bundle issued the certificate")
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if leaf.CheckSignatureFrom(c) == nil {
			return c
		}
	}
}

// probeLog is the probe container's whole log on the node.
func probeLog(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cluster.Node.Dir, "pod-logs", trustNamespace+"_"+probePod+"_*", "*", "*.log"))
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
