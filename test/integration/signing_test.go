package integration

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

const signTimeout = 60 * time.Second

func requestFor(t *testing.T, name, signer string, o fixtures.CSROptions, usages ...certv1alpha1.KeyUsage) *certv1alpha1.CertificateSigningRequest {
	return &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request:           fixtures.CSRPEM(t, o),
			SignerName:        signer,
			ExpirationSeconds: ptr.To[int32](7200),
			Usages:            usages,
		},
	}
}

// createAndApprove returns the approval's response.
func createAndApprove(t *testing.T, client clientset.Interface, csr *certv1alpha1.CertificateSigningRequest) *certv1alpha1.CertificateSigningRequest {
	t.Helper()
	ctx := context.Background()
	created, err := client.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s: %v", csr.Name, err)
	}
	addCondition(created, certv1alpha1.CertificateApproved, "Test")
	approved, err := client.CertificatesV1alpha1().CertificateSigningRequests().UpdateApproval(ctx, created.Name, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("approve %s: %v", csr.Name, err)
	}
	return approved
}

// waitFor waits until cond holds for the request and returns it.
func waitFor(t *testing.T, client clientset.Interface, name string, timeout time.Duration, cond func(*certv1alpha1.CertificateSigningRequest) bool) *certv1alpha1.CertificateSigningRequest {
	t.Helper()
	var last *certv1alpha1.CertificateSigningRequest
	framework.Eventually(t, timeout, "request "+name, func(ctx context.Context) error {
		csr, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		last = csr
		if !cond(csr) {
			return fmt.Errorf("condition not reached; status: %s", statusOf(csr))
		}
		return nil
	})
	return last
}

// statusOf is a request's status for a message: its conditions, and the
// certificate's size rather than its bytes.
func statusOf(csr *certv1alpha1.CertificateSigningRequest) string {
	return fmt.Sprintf("conditions %+v, certificate %d bytes", csr.Status.Conditions, len(csr.Status.Certificate))
}

func issued(csr *certv1alpha1.CertificateSigningRequest) bool { return len(csr.Status.Certificate) > 0 }

func waitForCertificate(t *testing.T, client clientset.Interface, name string) *x509.Certificate {
	t.Helper()
	csr := waitFor(t, client, name, signTimeout, func(c *certv1alpha1.CertificateSigningRequest) bool {
		return issued(c) || hasCondition(c, certv1alpha1.CertificateFailed)
	})
	if !issued(csr) {
		t.Fatalf("request %s failed: %+v", name, csr.Status.Conditions)
	}
	certs, err := validation.ParseCertificateChain(csr.Status.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

// caOf waits until the CertificateAuthority has a current certificate and
// returns it.
func caOf(t *testing.T, client clientset.Interface, caName string) *x509.Certificate {
	t.Helper()
	var cert *x509.Certificate
	framework.Eventually(t, signTimeout, "CertificateAuthority "+caName+" has a certificate", func(ctx context.Context) error {
		ca, err := client.RotationV1alpha1().CertificateAuthorities().Get(ctx, caName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ca.Status.Current == nil {
			return fmt.Errorf("no current certificate; status %+v", ca.Status)
		}
		if cert, err = authority.ParseCertificatePEM(ca.Status.Current.Certificate); err != nil {
			return framework.Permanent(err)
		}
		return nil
	})
	return cert
}

func verifyChain(t *testing.T, leaf, ca *x509.Certificate, usage x509.ExtKeyUsage) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		t.Fatalf("certificate does not chain to the signer's CA: %v", err)
	}
	if leaf.IsCA {
		t.Fatal("issued a CA certificate")
	}
}

func TestApprovedRequestIsSignedByTheBuiltInSigner(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	client := srv.Client
	ca := caOf(t, client, "rekey.io-kube-apiserver-client")

	createAndApprove(t, client, requestFor(t, "client-a", "rekey.io/kube-apiserver-client",
		fixtures.CSROptions{CommonName: "alice", Organizations: []string{"dev"}},
		certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth))
	leaf := waitForCertificate(t, client, "client-a")
	verifyChain(t, leaf, ca, x509.ExtKeyUsageClientAuth)
	if leaf.Subject.CommonName != "alice" || leaf.Subject.Organization[0] != "dev" {
		t.Errorf("subject = %v", leaf.Subject)
	}
	if leaf.KeyUsage != x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment || len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Errorf("usages = %v %v", leaf.KeyUsage, leaf.ExtKeyUsage)
	}
	// Lifetime: the requested 2h, backdated five minutes.
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got != 2*time.Hour+5*time.Minute {
		t.Errorf("lifetime = %v, want 2h5m", got)
	}

	// Serving: kubelet-serving with a DNS SAN, requested by the node itself
	// (the policy certifies a node in its own name only).
	node, _ := srv.ClientFor(t, "system:node:n1", "system:nodes")
	created, err := node.CertificatesV1alpha1().CertificateSigningRequests().Create(context.Background(), requestFor(t, "serving-a", "rekey.io/kubelet-serving",
		fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}, DNSNames: []string{"n1.example.com"}},
		certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageServerAuth), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addCondition(created, certv1alpha1.CertificateApproved, "Test")
	if _, err := client.CertificatesV1alpha1().CertificateSigningRequests().UpdateApproval(context.Background(), "serving-a", created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	serving := waitForCertificate(t, client, "serving-a")
	verifyChain(t, serving, caOf(t, client, "rekey.io-kubelet-serving"), x509.ExtKeyUsageServerAuth)
	if serving.DNSNames[0] != "n1.example.com" {
		t.Errorf("SANs = %v", serving.DNSNames)
	}

	metrics, err := client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`rekey_signer_requests_total{path="approval",result="issued",signer_name="rekey.io/kube-apiserver-client"} 1`,
		`rekey_signer_honored_duration_seconds_count{signer_name="rekey.io/kubelet-serving"} 1`,
		`rekey_signer_approval_to_certificate_seconds_count{signer_name="rekey.io/kube-apiserver-client"} 1`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestPolicyViolationFailsWithTheRule(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	client := srv.Client
	createAndApprove(t, client, requestFor(t, "bad-node", "rekey.io/kube-apiserver-client-kubelet",
		fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes", "admins"}},
		certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth))
	csr := waitFor(t, client, "bad-node", signTimeout, func(c *certv1alpha1.CertificateSigningRequest) bool {
		return hasCondition(c, certv1alpha1.CertificateFailed) || issued(c)
	})
	if issued(csr) {
		t.Fatal("a request that breaks the policy got a certificate")
	}
	for _, c := range csr.Status.Conditions {
		if c.Type == certv1alpha1.CertificateFailed {
			if c.Reason != "SignerPolicyViolation" || !strings.Contains(c.Message, "policy.subject.organizations") {
				t.Fatalf("Failed condition does not name the rule: %+v", c)
			}
		}
	}
}

func TestDeniedRequestIsNeverSigned(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	client := srv.Client
	ctx := context.Background()
	denied, err := client.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, requestFor(t, "denied", "rekey.io/kube-apiserver-client",
		fixtures.CSROptions{CommonName: "mallory"}, certv1alpha1.UsageClientAuth), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addCondition(denied, certv1alpha1.CertificateDenied, "No")
	if _, err := client.CertificatesV1alpha1().CertificateSigningRequests().UpdateApproval(ctx, "denied", denied, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A request approved after it proves the signer is running.
	createAndApprove(t, client, requestFor(t, "witness", "rekey.io/kube-apiserver-client", fixtures.CSROptions{CommonName: "w"}, certv1alpha1.UsageClientAuth))
	waitForCertificate(t, client, "witness")
	// Checked throughout a window, failing at the first sign of action.
	framework.Stays(t, 2*time.Second, "the denied request is left alone", func(ctx context.Context) error {
		got, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, "denied", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if issued(got) || hasCondition(got, certv1alpha1.CertificateFailed) {
			return fmt.Errorf("denied request was acted on: %s", statusOf(got))
		}
		return nil
	})
}

func TestSameRequestTwiceGetsTwoCertificates(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	client := srv.Client
	key := fixtures.NewKey(t)
	pemReq := fixtures.CSRPEMWithKey(t, key, fixtures.CSROptions{CommonName: "twice"})
	for _, n := range []string{"twice-1", "twice-2"} {
		r := requestFor(t, n, "rekey.io/kube-apiserver-client", fixtures.CSROptions{}, certv1alpha1.UsageClientAuth)
		r.Spec.Request = pemReq
		createAndApprove(t, client, r)
	}
	a, b := waitForCertificate(t, client, "twice-1"), waitForCertificate(t, client, "twice-2")
	if a.SerialNumber.Cmp(b.SerialNumber) == 0 {
		t.Fatal("two requests got the same certificate")
	}
	if !key.PublicKey.Equal(a.PublicKey) || !key.PublicKey.Equal(b.PublicKey) {
		t.Fatal("certificates are not for the requested key")
	}
}

// TestKeyAlgorithms creates a CA per algorithm with a signer on it.
func TestKeyAlgorithms(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	client := srv.Client
	for _, alg := range []rotationv1alpha1.KeyAlgorithm{rotationv1alpha1.ECDSAP384, rotationv1alpha1.RSA2048, rotationv1alpha1.RSA3072, rotationv1alpha1.Ed25519} {
		name := strings.ToLower(string(alg))
		createCAAndSigner(t, client, name, rotationv1alpha1.CertificateAuthoritySpec{CommonName: name, KeyAlgorithm: alg})
		csrName := "alg-" + name
		createAndApprove(t, client, requestFor(t, csrName, "example.com/"+name, fixtures.CSROptions{CommonName: "x"}, certv1alpha1.UsageClientAuth))
		leaf := waitForCertificate(t, client, csrName)
		verifyChain(t, leaf, caOf(t, client, name), x509.ExtKeyUsageClientAuth)
	}
}

func createCAAndSigner(t *testing.T, client clientset.Interface, name string, spec rotationv1alpha1.CertificateAuthoritySpec) {
	t.Helper()
	ctx := context.Background()
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CA %s: %v", name, err)
	}
	if _, err := client.CertificatesV1alpha1().Signers().Create(ctx, &certv1alpha1.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: "example.com:" + name},
		Spec: certv1alpha1.SignerSpec{
			SignerName:              "example.com/" + name,
			CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: name},
			Policy: certv1alpha1.SignerPolicy{
				AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth, certv1alpha1.UsageDigitalSignature},
				MaxDuration:   metav1.Duration{Duration: 24 * time.Hour},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create signer %s: %v", name, err)
	}
}

func TestSignerValidation(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	_, err := srv.Client.CertificatesV1alpha1().Signers().Create(context.Background(), &certv1alpha1.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: "wrong-name"},
		Spec: certv1alpha1.SignerSpec{SignerName: "example.com/x", CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "ca"},
			Policy: certv1alpha1.SignerPolicy{MaxDuration: metav1.Duration{Duration: time.Minute}}},
	}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "metadata.name") || !strings.Contains(err.Error(), "example.com:x") || !strings.Contains(err.Error(), "spec.policy.maxDuration") {
		t.Fatalf("want 422 naming metadata.name and spec.policy.maxDuration, got %v", err)
	}
	_, err = srv.Client.RotationV1alpha1().CertificateAuthorities().Create(context.Background(), &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Spec:       rotationv1alpha1.CertificateAuthoritySpec{CommonName: "x", KeyAlgorithm: "DSA-1024"},
	}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec.keyAlgorithm") {
		t.Fatalf("want 422 naming spec.keyAlgorithm, got %v", err)
	}
}
