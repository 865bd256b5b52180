package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/controller/hostcsr"
	"rekey.io/rekey/pkg/issuer"
	"rekey.io/rekey/test/framework"
)

// TestHostCSR: rekey approves and signs the shared kube-apiserver's own
// certificates.k8s.io/v1 CSRs of the signer names whose Signer sets
// spec.hostCluster.certificateSigningRequests, with rekey's identity and
// the RBAC shipped in artifacts/deploy (approve and sign on rekey.io/*);
// kube-controller-manager does not run, so nothing else would. NodeClient
// approves after a SubjectAccessReview in certificates.k8s.io (the user
// bound to kube's nodeclient ClusterRole is approved, one without it is
// not); NodeServing approves against a Node and leaves a request with an
// extra SAN pending with a NotAutoApproved event naming the rule; a Manual
// signer's CSR is signed once `kubectl certificate approve` approves it,
// and one the policy refuses is Failed with the rule; a signer name whose
// Signer does not serve the host cluster is never touched.
func TestHostCSR(t *testing.T) {
	t.Parallel()
	cluster := kubeCluster(t)
	ctx := context.Background()
	admin, rekey := cluster.Admin, cluster.RekeyAdmin

	// The cluster is shared (kubeCluster): every name here carries "hostcsr".
	const (
		caName    = "it-hostcsr-ca"
		nodeName  = "it-hostcsr-n1"
		nodeDNS   = "it-hostcsr-n1.example.com"
		nodeIP    = "10.77.0.17"
		bootUser  = "it-hostcsr-bootstrap"
		plainUser = "it-hostcsr-plain"
		client    = "rekey.io/hostcsr-client"
		serving   = "rekey.io/hostcsr-serving"
		manual    = "rekey.io/hostcsr-manual"
		nohost    = "rekey.io/hostcsr-nohost"
	)
	if _, err := rekey.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: caName},
		Spec:       rotationv1alpha1.CertificateAuthoritySpec{CommonName: "it hostcsr CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rekey.RotationV1alpha1().CertificateAuthorities().Delete(context.Background(), caName, metav1.DeleteOptions{})
	})
	clientUsages := []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth}
	servingUsages := []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageServerAuth}
	serveCSRs := &certv1alpha1.HostClusterServing{CertificateSigningRequests: true}
	signers := []certv1alpha1.Signer{
		{Spec: certv1alpha1.SignerSpec{SignerName: client, Approval: certv1alpha1.SignerApproval{Mode: certv1alpha1.ApprovalNodeClient}, HostCluster: serveCSRs,
			Policy: certv1alpha1.SignerPolicy{AllowedUsages: clientUsages, Subject: certv1alpha1.SubjectPolicy{CommonNamePrefix: "system:node:"}}}},
		{Spec: certv1alpha1.SignerSpec{SignerName: serving, Approval: certv1alpha1.SignerApproval{Mode: certv1alpha1.ApprovalNodeServing}, HostCluster: serveCSRs,
			Policy: certv1alpha1.SignerPolicy{AllowedUsages: servingUsages, Subject: certv1alpha1.SubjectPolicy{CommonNamePrefix: "system:node:"},
				SubjectAltNames: certv1alpha1.SubjectAltNamePolicy{Allowed: []certv1alpha1.SubjectAltNameType{certv1alpha1.SANTypeDNS, certv1alpha1.SANTypeIP}}}}},
		{Spec: certv1alpha1.SignerSpec{SignerName: manual, Approval: certv1alpha1.SignerApproval{Mode: certv1alpha1.ApprovalManual}, HostCluster: serveCSRs,
			Policy: certv1alpha1.SignerPolicy{AllowedUsages: clientUsages, Subject: certv1alpha1.SubjectPolicy{CommonNamePrefix: "hostcsr-"}}}},
		// The same as the others but for the host cluster: rekey serves
		// its certificates.rekey.io requests only.
		{Spec: certv1alpha1.SignerSpec{SignerName: nohost, Approval: certv1alpha1.SignerApproval{Mode: certv1alpha1.ApprovalNodeClient},
			Policy: certv1alpha1.SignerPolicy{AllowedUsages: clientUsages}}},
	}
	for _, s := range signers {
		s.Name = strings.ReplaceAll(s.Spec.SignerName, "/", ":")
		s.Spec.CertificateAuthorityRef.Name = caName
		s.Spec.Policy.MaxDuration = metav1.Duration{Duration: time.Hour}
		if _, err := rekey.CertificatesV1alpha1().Signers().Create(ctx, &s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating Signer %s: %v", s.Spec.SignerName, err)
		}
		t.Cleanup(func() {
			_ = rekey.CertificatesV1alpha1().Signers().Delete(context.Background(), s.Name, metav1.DeleteOptions{})
		})
	}

	bind := func(user, role string) {
		t.Helper()
		name := "it-hostcsr-" + sanitizeName(user) + "-" + sanitizeName(role)
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("binding %s to %s: %v", user, role, err)
		}
		t.Cleanup(func() {
			_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	kubeAs := func(user string, groups ...string) kubernetes.Interface {
		t.Helper()
		path, err := cluster.UserKubeconfig(user, groups...)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Both may create CSRs (kube's system:node-bootstrapper); only the
	// bootstrap user may have a node's client certificate (kube's
	// nodeclient ClusterRole, which kube-controller-manager's approver
	// asks about too).
	bind(bootUser, "system:node-bootstrapper")
	bind(bootUser, "system:certificates.k8s.io:certificatesigningrequests:nodeclient")
	bind(plainUser, "system:node-bootstrapper")
	bootstrapper, plain := kubeAs(bootUser), kubeAs(plainUser)

	// create makes a CSR named after the test as c's user and removes it
	// when the test ends.
	create := func(t *testing.T, c kubernetes.Interface, name, signerName string, subject pkix.Name, dns []string, ips []net.IP, usages ...certificatesv1.KeyUsage) {
		t.Helper()
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: subject, DNSNames: dns, IPAddresses: ips}, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certificatesv1.CertificateSigningRequestSpec{
				Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), SignerName: signerName, Usages: usages,
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating CSR %s: %v", name, err)
		}
		t.Cleanup(func() {
			_ = admin.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	// issued waits for the CSR's certificate and returns it, checked
	// against the CA's current certificate.
	issued := func(t *testing.T, name string) *x509.Certificate {
		t.Helper()
		var cert *x509.Certificate
		framework.Eventually(t, 60*time.Second, "CSR "+name+" issued", func(ctx context.Context) error {
			csr, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if c := nativeCondition(csr, certificatesv1.CertificateFailed); c != nil {
				return framework.Permanent(fmt.Errorf("Failed: %s: %s", c.Reason, c.Message))
			}
			block, _ := pem.Decode(csr.Status.Certificate)
			if block == nil {
				return fmt.Errorf("no certificate yet (conditions %+v)", csr.Status.Conditions)
			}
			cert, err = x509.ParseCertificate(block.Bytes)
			return err
		})
		ca, err := rekey.RotationV1alpha1().CertificateAuthorities().Get(ctx, caName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		if ca.Status.Current == nil || !roots.AppendCertsFromPEM([]byte(ca.Status.Current.Certificate)) {
			t.Fatalf("CA %s has no current certificate", caName)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Fatalf("CSR %s's certificate does not verify against CA %s: %v", name, caName, err)
		}
		return cert
	}
	pending := func(t *testing.T, name string, window time.Duration) {
		t.Helper()
		framework.Stays(t, window, "CSR "+name+" untouched", func(ctx context.Context) error {
			csr, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(csr.Status.Certificate) > 0 || nativeCondition(csr, certificatesv1.CertificateFailed) != nil {
				return fmt.Errorf("certificate or Failed written: %+v", csr.Status.Conditions)
			}
			if c := nativeCondition(csr, certificatesv1.CertificateApproved); c != nil && c.Reason != "KubectlApprove" {
				return fmt.Errorf("approved by %s: %s", c.Reason, c.Message)
			}
			return nil
		})
	}
	approve := func(t *testing.T, name string) {
		t.Helper()
		if out, stderr, err := framework.RunKubectl(t, cluster.AdminKubeconfig, nil, "certificate", "approve", name); err != nil {
			t.Fatalf("kubectl certificate approve %s: %v\n%s%s", name, err, out, stderr)
		}
	}
	nodeSubject := pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}}
	// A stock kubelet's ECDSA key asks for these two usages only.
	kubeletClientUsages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}

	t.Run("NodeClient", func(t *testing.T) {
		t.Parallel()
		create(t, bootstrapper, "it-hostcsr-nodeclient", client, nodeSubject, nil, nil, kubeletClientUsages...)
		create(t, plain, "it-hostcsr-nodeclient-denied", client, nodeSubject, nil, nil, kubeletClientUsages...)
		cert := issued(t, "it-hostcsr-nodeclient")
		if cert.Subject.CommonName != nodeSubject.CommonName {
			t.Errorf("CN %q, want %q", cert.Subject.CommonName, nodeSubject.CommonName)
		}
		csr, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "it-hostcsr-nodeclient", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := nativeCondition(csr, certificatesv1.CertificateApproved); c == nil || c.Reason != issuer.ReasonAutoApproved || !strings.Contains(c.Message, "certificatesigningrequests/nodeclient") {
			t.Errorf("Approved condition %+v, want AutoApproved after the nodeclient review", c)
		}
		// The same request from a user without the nodeclient permission
		// is left for a person.
		pending(t, "it-hostcsr-nodeclient-denied", 5*time.Second)
	})

	t.Run("NodeServing", func(t *testing.T) {
		t.Parallel()
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), nodeName, metav1.DeleteOptions{}) })
		framework.Eventually(t, 30*time.Second, "Node "+nodeName+" addresses", func(ctx context.Context) error {
			node, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: nodeDNS}, {Type: corev1.NodeInternalIP, Address: nodeIP}}
			_, err = admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
			return err
		})
		node := kubeAs("system:node:"+nodeName, "system:nodes")
		ips := []net.IP{net.ParseIP(nodeIP)}
		// rekey reads Nodes from its cache, which may not show the
		// addresses yet: a young CSR's refusal is decided again (every
		// 20s), as a kubelet's first serving CSR needs.
		create(t, node, "it-hostcsr-serving", serving, nodeSubject, []string{nodeDNS}, ips, certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth)
		create(t, node, "it-hostcsr-serving-extra", serving, nodeSubject, []string{nodeDNS, "it-hostcsr-evil.example.com"}, ips,
			certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth)
		cert := issued(t, "it-hostcsr-serving")
		if len(cert.DNSNames) != 1 || cert.DNSNames[0] != nodeDNS || len(cert.IPAddresses) != 1 || !cert.IPAddresses[0].Equal(ips[0]) {
			t.Errorf("SANs %v %v, want %s %s", cert.DNSNames, cert.IPAddresses, nodeDNS, nodeIP)
		}
		framework.Eventually(t, 30*time.Second, "NotAutoApproved event on it-hostcsr-serving-extra", func(ctx context.Context) error {
			events, err := admin.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "it-hostcsr-serving-extra").String()})
			if err != nil {
				return err
			}
			for _, e := range events.Items {
				if e.Reason == hostcsr.ReasonNotAutoApproved && e.Type == corev1.EventTypeWarning &&
					strings.Contains(e.Message, `DNS name "it-hostcsr-evil.example.com" is not among Node `+nodeName+`'s addresses`) {
					return nil
				}
			}
			return fmt.Errorf("no NotAutoApproved event naming the extra DNS name among %d events", len(events.Items))
		})
		pending(t, "it-hostcsr-serving-extra", 3*time.Second)
	})

	t.Run("Manual", func(t *testing.T) {
		t.Parallel()
		create(t, admin, "it-hostcsr-manual", manual, pkix.Name{CommonName: "hostcsr-alice"}, nil, nil, kubeletClientUsages...)
		create(t, admin, "it-hostcsr-manual-refused", manual, pkix.Name{CommonName: "mallory"}, nil, nil, kubeletClientUsages...)
		// Nobody approved it: rekey waits for a person.
		pending(t, "it-hostcsr-manual", 3*time.Second)
		approve(t, "it-hostcsr-manual")
		if cert := issued(t, "it-hostcsr-manual"); cert.Subject.CommonName != "hostcsr-alice" {
			t.Errorf("CN %q", cert.Subject.CommonName)
		}
		// Approved by a person, refused by the policy: Failed with the rule.
		approve(t, "it-hostcsr-manual-refused")
		framework.Eventually(t, 60*time.Second, "CSR it-hostcsr-manual-refused Failed", func(ctx context.Context) error {
			csr, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "it-hostcsr-manual-refused", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(csr.Status.Certificate) > 0 {
				return framework.Permanent(errors.New("a certificate was issued against the policy"))
			}
			c := nativeCondition(csr, certificatesv1.CertificateFailed)
			if c == nil {
				return fmt.Errorf("not Failed yet: %+v", csr.Status.Conditions)
			}
			if c.Reason != authority.ReasonPolicyViolation || !strings.Contains(c.Message, "policy.subject.commonNamePrefix") {
				return framework.Permanent(fmt.Errorf("Failed %s: %s, want %s naming policy.subject.commonNamePrefix", c.Reason, c.Message, authority.ReasonPolicyViolation))
			}
			return nil
		})
	})

	t.Run("NotServed", func(t *testing.T) {
		t.Parallel()
		// A node client request the bootstrap user may have, and an
		// approved one: with no Signer serving the host cluster for the
		// name, rekey neither approves nor signs.
		create(t, bootstrapper, "it-hostcsr-nohost-pending", nohost, nodeSubject, nil, nil, kubeletClientUsages...)
		create(t, admin, "it-hostcsr-nohost-approved", nohost, nodeSubject, nil, nil, kubeletClientUsages...)
		approve(t, "it-hostcsr-nohost-approved")
		// A served signer's request approved after those is signed, so
		// the controller has seen them; then they are still untouched.
		create(t, admin, "it-hostcsr-nohost-control", manual, pkix.Name{CommonName: "hostcsr-bob"}, nil, nil, kubeletClientUsages...)
		approve(t, "it-hostcsr-nohost-control")
		issued(t, "it-hostcsr-nohost-control")
		pending(t, "it-hostcsr-nohost-pending", 5*time.Second)
		pending(t, "it-hostcsr-nohost-approved", time.Second)
	})
}

func nativeCondition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequestCondition {
	for i := range csr.Status.Conditions {
		if c := &csr.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

func sanitizeName(s string) string {
	return strings.NewReplacer(":", "-", "/", "-", "*", "-").Replace(s)
}
