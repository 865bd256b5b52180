package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/standalone"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

// revokeUser is the kubeconfig user whose certificates the revocation test
// revokes (one of two).
const revokeUser = "e2e-revoke-user"

// TestRevocationEnforced is issue #31's proof on a real kube-apiserver
// configured as docs/revocation.md gives it (the shared cluster runs with
// RevocationWebhookAuthorizer, failurePolicy NoOpinion): a user's
// kubeconfig with a rekey client certificate works; `kubectl rekey revoke`
// makes kube-apiserver refuse the next request with it (403 naming the
// revocation), well within a second; a second certificate of the same user
// and signer still works; rekey itself refuses the revoked certificate
// (401). Then the failure policy: with rekey stopped, NoOpinion lets the
// revoked certificate through again (fail open, as documented) and
// kube-apiserver counts it in
// apiserver_authorization_webhook_evaluations_fail_open_total; with Deny
// (kube-apiserver restarted with the other configuration) every client
// certificate is refused while rekey is down (500: kube-apiserver answers
// an authorizer's error so), system:masters excepted, and once rekey is
// back only the revoked one is.
func TestRevocationEnforced(t *testing.T) {
	ctx := context.Background()
	ca := caWithBundle(t, userClientCA)
	if err := cluster.TrustClientCAs([]byte(ca.Status.TrustBundle)); err != nil {
		t.Fatal(err)
	}
	revoked := issueUserCertificateFor(t, "e2e-revoke-a", revokeUser)
	other := issueUserCertificateFor(t, "e2e-revoke-b", revokeUser)
	sum := sha256.Sum256(revoked.leaf.Raw)
	revokedSHA := hex.EncodeToString(sum[:])

	// A kubeconfig with the certificate works (kube-apiserver reloads its
	// client CA file within seconds).
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := standalone.WriteKubeconfig(kubeconfig, cluster.KubeAPIURL, cluster.ServingCA.CertPEM(), revokeUser, revoked.certPEM, revoked.keyPEM); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	revokedClient := kubernetes.NewForConfigOrDie(cfg)
	otherClient := other.client(t)
	framework.Eventually(t, 60*time.Second, "both certificates authenticating to kube-apiserver", func(ctx context.Context) error {
		if err := reviewAs(ctx, revokedClient); err != nil {
			return err
		}
		return reviewAs(ctx, otherClient)
	})
	if out, errOut, err := framework.RunKubectl(t, kubeconfig, nil, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); err != nil || out != revokeUser {
		t.Fatalf("kubectl auth whoami with the kubeconfig: %v %q %s", err, out, errOut)
	}

	plugin := framework.Binary(t, "kubectl-rekey")
	env := []string{"PATH=" + filepath.Dir(plugin) + string(os.PathListSeparator) + os.Getenv("PATH")}

	// A user who may read the request and create Revocations but holds no
	// revoke on the signer is refused (SignerRevocation's 403), and the
	// certificate keeps working.
	clusterRole(t, "e2e-revoke-without-grant",
		rbacv1.PolicyRule{APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"get"}},
		rbacv1.PolicyRule{APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"revocations"}, Verbs: []string{"create", "get"}})
	bind(t, "e2e-revoke-mallory", "e2e-revoke-without-grant")
	_, malloryKubeconfig := userClient(t, "e2e-revoke-mallory")
	malloryRevoked := false
	framework.Eventually(t, settleTimeout, "kubectl rekey revoke without the revoke verb refused by rekey", func(ctx context.Context) error {
		out, errOut, err := framework.RunKubectlWithEnv(t, malloryKubeconfig, env, nil, "rekey", "revoke", "e2e-revoke-a")
		if err == nil {
			malloryRevoked = true
			return nil
		}
		if !strings.Contains(errOut, `may not revoke certificates of signer "`+userSigner+`"`) || !strings.Contains(errOut, "Forbidden") && !strings.Contains(errOut, "forbidden") {
			return fmt.Errorf("refused, but not by the signer check yet: %v\nout %q\nerr %q", err, out, errOut)
		}
		return nil
	})
	if malloryRevoked {
		t.Fatal("a user without verb revoke on the signer revoked the certificate")
	}
	if err := reviewAs(ctx, revokedClient); err != nil {
		t.Fatalf("the certificate after the refused revocation: %v", err)
	}

	// Revoke it; the next request is refused, with the revocation named.
	out, errOut, err := framework.RunKubectlWithEnv(t, cluster.AdminKubeconfig, env, nil, "rekey", "revoke", "e2e-revoke-a", "--reason", "KeyCompromise")
	revokedAt := time.Now()
	if want := "revocation.certificates.rekey.io/" + revokedSHA + " revoked (KeyCompromise)"; err != nil || !strings.Contains(out, want) {
		t.Fatalf("kubectl rekey revoke: %v\nout %q, want %q\nerr %s", err, out, want, errOut)
	}
	wantReason := "X509SHA256=" + revokedSHA + " was revoked (KeyCompromise)"
	framework.Eventually(t, 10*time.Second, "kube-apiserver refusing the revoked certificate", func(ctx context.Context) error {
		return refusedAsRevoked(reviewAs(ctx, revokedClient), wantReason)
	})
	latency := time.Since(revokedAt)
	t.Logf("from kubectl rekey revoke returning to the first 403: %v (looking every %v)", latency, framework.Interval)
	if latency > time.Second {
		t.Errorf("the first 403 came %v after the revocation; the target is under 1s", latency)
	}
	// kubectl is refused too: its discovery requests (whose 403 kubectl
	// prints as "Forbidden: unknown") and a resource request, whose message
	// names the revocation.
	if out, errOut, err := framework.RunKubectl(t, kubeconfig, nil, "get", "namespaces"); err == nil || !strings.Contains(errOut, "Forbidden") {
		t.Errorf("kubectl get namespaces with the revoked kubeconfig: %v, out %q, err %q; want Forbidden", err, out, errOut)
	}
	if out, errOut, err := framework.RunKubectl(t, kubeconfig, nil, "get", "--raw", "/api/v1/namespaces"); err == nil || !strings.Contains(errOut, wantReason) {
		t.Errorf("kubectl get --raw /api/v1/namespaces with the revoked kubeconfig: %v, out %q, err %q; want refused with %q", err, out, errOut, wantReason)
	}
	// The same user's other certificate, same signer, still works.
	framework.Stays(t, time.Second, "the other certificate working", func(ctx context.Context) error {
		return reviewAs(ctx, otherClient)
	})

	// The CA's CRL, fetched without credentials, lists the revoked
	// certificate: openssl -crl_check refuses it and takes the other.
	crlCheck(t, userClientCA, []byte(ca.Status.TrustBundle), revoked, other)

	// rekey's own authentication refuses it: 401 straight to rekey, while
	// the other certificate authenticates there.
	framework.Eventually(t, 30*time.Second, "rekey refusing the revoked certificate and taking the other", func(ctx context.Context) error {
		if code := rekeyStatus(ctx, revoked); code != http.StatusUnauthorized {
			return fmt.Errorf("the revoked certificate straight to rekey: %d, want 401", code)
		}
		if code := rekeyStatus(ctx, other); code != http.StatusOK {
			return fmt.Errorf("the other certificate straight to rekey: %d, want 200", code)
		}
		return nil
	})
	if n := rekeyMetric(t, `rekey_revocation_webhook_decisions_total{decision="deny"}`); n < 1 {
		t.Errorf("rekey counted %v deny decisions", n)
	}
	if n := rekeyMetric(t, "rekey_revoked_certificates"); n < 1 {
		t.Errorf("rekey_revoked_certificates = %v", n)
	}

	// Fail open: rekey stopped, NoOpinion lets the revoked certificate
	// through, and kube-apiserver counts it.
	failOpen := kubeMetric(t, `apiserver_authorization_webhook_evaluations_fail_open_total{name="rekey-revocation",`)
	restoreKube, restoreRekey := false, true
	t.Cleanup(func() {
		if restoreKube {
			if err := cluster.RestartKubeAPIServer(); err != nil {
				t.Errorf("restoring kube-apiserver: %v", err)
			}
		}
		if restoreRekey {
			if err := cluster.RestartRekey(); err != nil {
				t.Errorf("restarting rekey: %v", err)
			}
		}
	})
	cluster.Rekey.Stop(30 * time.Second)
	framework.Eventually(t, 30*time.Second, "the revoked certificate working with rekey down (fail open)", func(ctx context.Context) error {
		return reviewAs(ctx, revokedClient)
	})
	if n := kubeMetric(t, `apiserver_authorization_webhook_evaluations_fail_open_total{name="rekey-revocation",`); n <= failOpen {
		t.Errorf("apiserver_authorization_webhook_evaluations_fail_open_total for rekey-revocation: %v, was %v", n, failOpen)
	} else {
		t.Logf("fail-open evaluations: %v -> %v", failOpen, n)
	}

	// Fail closed: kube-apiserver with failurePolicy Deny, rekey still down:
	// a client certificate is refused; system:masters is not asked about.
	// kube-apiserver's authorization filter answers an authorizer's error
	// with 500 (naming the failed webhook call), not 403.
	restoreKube = true
	if err := cluster.RestartKubeAPIServer("--authorization-config=" + cluster.RevocationAuthorizationConfigPath(framework.RevocationFailClosed)); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "a certificate refused with rekey down (fail closed)", func(ctx context.Context) error {
		if err := reviewAs(ctx, otherClient); !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), framework.RevocationWebhookPath) {
			return fmt.Errorf("the other certificate with rekey down under Deny: %v, want 500 naming the webhook", err)
		}
		return nil
	})
	if _, err := cluster.Admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		t.Errorf("system:masters with rekey down under Deny: %v", err)
	}
	// rekey back: under Deny the other certificate works, the revoked one
	// does not.
	if err := cluster.RestartRekey(); err != nil {
		t.Fatal(err)
	}
	restoreRekey = false
	framework.Eventually(t, 60*time.Second, "with rekey back, the other certificate working and the revoked one refused", func(ctx context.Context) error {
		if err := reviewAs(ctx, otherClient); err != nil {
			return err
		}
		return refusedAsRevoked(reviewAs(ctx, revokedClient), wantReason)
	})
	if err := cluster.RestartKubeAPIServer(); err != nil {
		t.Fatal(err)
	}
	restoreKube = false
	framework.Eventually(t, 60*time.Second, "the revoked certificate refused after kube-apiserver's restart", func(ctx context.Context) error {
		return refusedAsRevoked(reviewAs(ctx, revokedClient), wantReason)
	})
}

// issueUserCertificateFor has the admin request (as CSR name) and approve
// a certificate of rekey.io/kube-apiserver-client for user.
func issueUserCertificateFor(t *testing.T, name, user string) *userCertificate {
	t.Helper()
	key := fixtures.NewKey(t)
	csr := &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request:           fixtures.CSRPEMWithKey(t, key, fixtures.CSROptions{CommonName: user}),
			SignerName:        userSigner,
			ExpirationSeconds: ptr.To[int32](3600),
			Usages:            []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth},
		},
	}
	csrs := cluster.RekeyAdmin.CertificatesV1alpha1().CertificateSigningRequests()
	create(t, cluster.RekeyAdmin, csr)
	t.Cleanup(func() { _ = csrs.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if err := approve(t, cluster.RekeyAdmin, name); err != nil {
		t.Fatalf("approving %s: %v", name, err)
	}
	var certPEM []byte
	framework.Eventually(t, 30*time.Second, name+" issued", func(ctx context.Context) error {
		got, err := csrs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if certPEM = got.Status.Certificate; len(certPEM) == 0 {
			return fmt.Errorf("no certificate: %+v", got.Status.Conditions)
		}
		return nil
	})
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certs := bundleCertificates(t, string(certPEM))
	if len(certs) == 0 {
		t.Fatalf("%s: no certificate in %q", name, certPEM)
	}
	return &userCertificate{leaf: certs[0], certPEM: certPEM, keyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}
}

// caWithBundle waits for CertificateAuthority name to have a trust bundle.
func caWithBundle(t *testing.T, name string) *rotationv1alpha1.CertificateAuthority {
	t.Helper()
	var ca *rotationv1alpha1.CertificateAuthority
	framework.Eventually(t, 60*time.Second, name+"'s trust bundle", func(ctx context.Context) error {
		var err error
		if ca, err = cluster.RekeyAdmin.RotationV1alpha1().CertificateAuthorities().Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if ca.Status.TrustBundle == "" {
			return fmt.Errorf("no trust bundle yet")
		}
		return nil
	})
	return ca
}

// reviewAs asks kube-apiserver who the client is (SelfSubjectReview: any
// authenticated user may, so only authentication and the revocation webhook
// decide).
func reviewAs(ctx context.Context, client kubernetes.Interface) error {
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if got := review.Status.UserInfo.Username; got != revokeUser {
		return framework.Permanent(fmt.Errorf("kube-apiserver sees %q, want %q", got, revokeUser))
	}
	return nil
}

// refusedAsRevoked: err is kube-apiserver's 403 with rekey's reason.
func refusedAsRevoked(err error, reason string) error {
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), reason) {
		return fmt.Errorf("the revoked certificate: %v, want 403 with %q", err, reason)
	}
	return nil
}

// rekeyStatus is the HTTP status rekey answers, straight (not through
// kube-apiserver), to a discovery request made with cert.
func rekeyStatus(ctx context.Context, cert *userCertificate) int {
	cfg := cluster.DirectToRekey(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CertData: cert.certPEM, KeyData: cert.keyPEM}})
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0
	}
	var code int
	client.Discovery().RESTClient().Get().AbsPath("/apis/certificates.rekey.io/v1alpha1").Do(ctx).StatusCode(&code)
	return code
}

// rekeyMetric is the value of the /metrics line that begins with series,
// read straight from rekey as the admin.
func rekeyMetric(t *testing.T, series string) float64 {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", cluster.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	body, err := kubernetes.NewForConfigOrDie(cluster.DirectToRekey(cfg)).Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("rekey's /metrics: %v", err)
	}
	return sumSeries(string(body), series)
}

// kubeMetric sums kube-apiserver's /metrics lines that begin with prefix.
func kubeMetric(t *testing.T, prefix string) float64 {
	t.Helper()
	body, err := cluster.Admin.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("kube-apiserver's /metrics: %v", err)
	}
	return sumSeries(string(body), prefix)
}

func sumSeries(body, prefix string) float64 {
	var total float64
	s := bufio.NewScanner(strings.NewReader(body))
	s.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		rest := line[len(prefix):]
		if !strings.HasPrefix(rest, " ") && !strings.Contains(prefix, "{") {
			// A longer name (rekey_revoked_certificates_x) or labels.
			if !strings.HasPrefix(rest, "{") {
				continue
			}
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			total += v
		}
	}
	return total
}

// crlCheck fetches /crl/<caName> from rekey with no credentials and has
// `openssl verify -crl_check` refuse revoked and accept valid, waiting for
// the CRL to be re-issued with the revocation.
func crlCheck(t *testing.T, caName string, bundle []byte, revoked, valid *userCertificate) {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	caFile := write("ca.crt", bundle)
	revokedFile, validFile := write("revoked.crt", revoked.certPEM), write("valid.crt", valid.certPEM)
	anonymous, err := kubernetes.NewForConfig(cluster.DirectToRekey(&rest.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "openssl -crl_check refusing the revoked certificate with the CRL rekey serves", func(ctx context.Context) error {
		der, err := anonymous.Discovery().RESTClient().Get().AbsPath("/crl/" + caName).DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("GET /crl/%s without credentials: %w", caName, err)
		}
		crlPEM := filepath.Join(dir, "ca.crl.pem")
		if out, err := exec.Command("openssl", "crl", "-inform", "DER", "-in", write("ca.crl", der), "-out", crlPEM).CombinedOutput(); err != nil {
			return fmt.Errorf("openssl crl: %v\n%s", err, out)
		}
		if out, err := exec.Command("openssl", "verify", "-crl_check", "-CRLfile", crlPEM, "-CAfile", caFile, validFile).CombinedOutput(); err != nil {
			t.Fatalf("openssl verify -crl_check refused the certificate not revoked: %v\n%s", err, out)
		}
		out, err := exec.Command("openssl", "verify", "-crl_check", "-CRLfile", crlPEM, "-CAfile", caFile, revokedFile).CombinedOutput()
		if err == nil {
			return fmt.Errorf("openssl verify -crl_check accepted the revoked certificate:\n%s", out)
		}
		if !strings.Contains(string(out), "certificate revoked") {
			t.Fatalf("openssl verify -crl_check refused the revoked certificate for another reason: %v\n%s", err, out)
		}
		return nil
	})
}
