package integration

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/controller/publisher"
	"rekey.io/rekey/test/framework"
)

// TestPodCertificateRequests: a Signer with spec.hostCluster.podCertificateRequests
// issues the shared kube-apiserver's PodCertificateRequests of its signer
// name, and kube-apiserver accepts the status rekey writes (it checks the
// key, the times, beginRefreshAt and the lifetime against
// maxExpirationSeconds). There is no kubelet: the test makes the Node,
// ServiceAccounts and Pods bound to that Node, then the requests a kubelet
// would, as the admin, with the objects' real UIDs. A service account the
// policy does not name is Denied NotAllowed, a request naming another
// pod UID IdentityMismatch, a key type the policy does not accept
// UnsupportedKeyType. The CA's ClusterTrustBundle for the signer name
// (spec.publish.clusterTrustBundle) holds the CA the certificate verifies
// against, as a pod's clusterTrustBundle projection would read it.
func TestPodCertificateRequests(t *testing.T) {
	t.Parallel()
	cluster := kubeCluster(t)
	ctx := context.Background()
	admin, rekey := cluster.Admin, cluster.RekeyAdmin

	// The cluster is shared (kubeCluster): every name here carries "podcert".
	const (
		ns          = "it-podcert"
		nodeName    = "it-podcert-node"
		caName      = "it-podcert-ca"
		signerName  = "rekey.io/podcert-it"
		allowedSA   = "allowed"
		otherSA     = "other"
		trustDomain = "it.rekey.example"
	)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	node, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), nodeName, metav1.DeleteOptions{}) })
	sas := map[string]*corev1.ServiceAccount{}
	for _, name := range []string{allowedSA, otherSA} {
		sa, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sas[name] = sa
	}
	// Each pod asks for a certificate of the signer, as the pods the
	// kubelet makes requests for do; "bare" asks for none.
	pods := map[string]*corev1.Pod{}
	for _, name := range []string{allowedSA, otherSA, "bare"} {
		sa := name
		var volumes []corev1.Volume
		if name == "bare" {
			sa = allowedSA
		} else {
			volumes = []corev1.Volume{{Name: "cert", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{PodCertificate: &corev1.PodCertificateProjection{
					SignerName: signerName, KeyType: "ECDSAP256", CredentialBundlePath: "credentials.pem"}}}}}}}
		}
		pod, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-pod"},
			Spec: corev1.PodSpec{
				NodeName: nodeName, ServiceAccountName: sa, AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
				Volumes:    volumes,
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods[name] = pod
	}

	ca := &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: caName},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{
			CommonName: "it podcert CA", KeyAlgorithm: rotationv1alpha1.ECDSAP384,
			Publish: &rotationv1alpha1.Publish{ClusterTrustBundle: true},
		},
	}
	if _, err := rekey.RotationV1alpha1().CertificateAuthorities().Create(ctx, ca, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rekey.RotationV1alpha1().CertificateAuthorities().Delete(context.Background(), caName, metav1.DeleteOptions{})
	})
	usages := []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth, certv1alpha1.UsageServerAuth}
	signer := &certv1alpha1.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: "rekey.io:podcert-it"},
		Spec: certv1alpha1.SignerSpec{
			SignerName:              signerName,
			CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: caName},
			Policy: certv1alpha1.SignerPolicy{
				AllowedUsages:   usages,
				MaxDuration:     metav1.Duration{Duration: 24 * time.Hour},
				SubjectAltNames: certv1alpha1.SubjectAltNamePolicy{Allowed: []certv1alpha1.SubjectAltNameType{certv1alpha1.SANTypeDNS, certv1alpha1.SANTypeURI}},
			},
			HostCluster: &certv1alpha1.HostClusterServing{PodCertificateRequests: &certv1alpha1.PodCertificatePolicy{
				Allowed:           []certv1alpha1.PodCertificateSubjects{{Namespace: ns, ServiceAccounts: []string{allowedSA}}},
				SPIFFETrustDomain: trustDomain,
				CommonName:        "$(podName)",
				DNSNames:          []string{"$(serviceAccount).$(namespace).svc"},
				KeyTypes:          []certv1alpha1.PodCertificateKeyType{certv1alpha1.PodCertificateKeyECDSAP256, certv1alpha1.PodCertificateKeyED25519},
			}},
		},
	}
	if _, err := rekey.CertificatesV1alpha1().Signers().Create(ctx, signer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rekey.CertificatesV1alpha1().Signers().Delete(context.Background(), signer.Name, metav1.DeleteOptions{})
	})

	// request creates what a kubelet would for a pod's podCertificate
	// volume source, with a stub request signed by key.
	request := func(t *testing.T, name string, pod *corev1.Pod, sa *corev1.ServiceAccount, key crypto.Signer, maxExpiration int32) *certificatesv1.PodCertificateRequest {
		t.Helper()
		stub, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "ignored"}}, key)
		if err != nil {
			t.Fatal(err)
		}
		pcr, err := admin.CertificatesV1().PodCertificateRequests(ns).Create(ctx, &certificatesv1.PodCertificateRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certificatesv1.PodCertificateRequestSpec{
				SignerName: signerName,
				PodName:    pod.Name, PodUID: pod.UID,
				ServiceAccountName: sa.Name, ServiceAccountUID: sa.UID,
				NodeName: types.NodeName(node.Name), NodeUID: node.UID,
				MaxExpirationSeconds: ptr.To(maxExpiration),
				StubPKCS10Request:    stub,
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating PodCertificateRequest %s: %v", name, err)
		}
		t.Cleanup(func() {
			_ = admin.CertificatesV1().PodCertificateRequests(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
		return pcr
	}
	p256 := func(t *testing.T) *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}

	t.Run("issued", func(t *testing.T) {
		key := p256(t)
		const lifetime = 2 * time.Hour
		request(t, "issued", pods[allowedSA], sas[allowedSA], key, int32(lifetime/time.Second))
		pcr := waitPCR(t, admin, ns, "issued", certificatesv1.PodCertificateRequestConditionTypeIssued)
		if c := pcrCondition(pcr, certificatesv1.PodCertificateRequestConditionTypeIssued); c.Reason != "Issued" {
			t.Errorf("Issued reason %q, want Issued", c.Reason)
		}
		// The status is what kube-apiserver accepted on the write (it
		// validates every field of an Issued status): read back, it holds
		// the chain and times.
		block, rest := pem.Decode([]byte(pcr.Status.CertificateChain))
		if block == nil {
			t.Fatalf("status.certificateChain holds no PEM: %q", pcr.Status.CertificateChain)
		}
		if extra, _ := pem.Decode(rest); extra != nil {
			t.Errorf("the chain of a self-signed CA's leaf holds more than the leaf")
		}
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if !key.Public().(*ecdsa.PublicKey).Equal(leaf.PublicKey) {
			t.Errorf("the leaf's key is not the stub request's")
		}
		if got := leaf.NotAfter.Sub(leaf.NotBefore); got != lifetime {
			t.Errorf("lifetime %s, want maxExpirationSeconds %s", got, lifetime)
		}
		if d := time.Since(leaf.NotBefore); d < 0 || d > 5*time.Minute {
			t.Errorf("notBefore %s is not within 5 minutes before now", leaf.NotBefore)
		}
		if !pcr.Status.NotBefore.Time.Equal(leaf.NotBefore) || !pcr.Status.NotAfter.Time.Equal(leaf.NotAfter) {
			t.Errorf("status times %s..%s, leaf %s..%s", pcr.Status.NotBefore, pcr.Status.NotAfter, leaf.NotBefore, leaf.NotAfter)
		}
		if r := pcr.Status.BeginRefreshAt.Time; r.Before(leaf.NotBefore.Add(10*time.Minute)) || r.After(leaf.NotAfter.Add(-10*time.Minute)) {
			t.Errorf("beginRefreshAt %s outside [notBefore+10m, notAfter-10m]", r)
		}
		wantURI := "spiffe://" + trustDomain + "/ns/" + ns + "/sa/" + allowedSA
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != wantURI {
			t.Errorf("URI SANs %v, want [%s]", leaf.URIs, wantURI)
		}
		if want := []string{allowedSA + "." + ns + ".svc"}; !slices.Equal(leaf.DNSNames, want) {
			t.Errorf("DNS SANs %v, want %v", leaf.DNSNames, want)
		}
		if leaf.Subject.CommonName != pods[allowedSA].Name {
			t.Errorf("common name %q, want the pod's name %q", leaf.Subject.CommonName, pods[allowedSA].Name)
		}
		if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) || !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
			t.Errorf("extended key usages %v, want client and server auth", leaf.ExtKeyUsage)
		}

		// The ClusterTrustBundle of the signer name holds the CA that
		// issued it.
		ctbName := publisher.ClusterTrustBundleName(signerName, caName)
		var ctb *certificatesv1.ClusterTrustBundle
		framework.Eventually(t, 60*time.Second, "ClusterTrustBundle "+ctbName+" published", func(ctx context.Context) error {
			ctb, err = admin.CertificatesV1().ClusterTrustBundles().Get(ctx, ctbName, metav1.GetOptions{})
			return err
		})
		if ctb.Spec.SignerName != signerName {
			t.Errorf("ClusterTrustBundle %s has signerName %q, want %q", ctbName, ctb.Spec.SignerName, signerName)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM([]byte(ctb.Spec.TrustBundle)) {
			t.Fatalf("ClusterTrustBundle %s holds no certificate", ctbName)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("the leaf does not verify against ClusterTrustBundle %s: %v", ctbName, err)
		}
	})

	t.Run("service account not allowed", func(t *testing.T) {
		request(t, "not-allowed", pods[otherSA], sas[otherSA], p256(t), 86400)
		pcr := waitPCR(t, admin, ns, "not-allowed", certificatesv1.PodCertificateRequestConditionTypeDenied)
		if c := pcrCondition(pcr, certificatesv1.PodCertificateRequestConditionTypeDenied); c.Reason != "NotAllowed" {
			t.Errorf("Denied reason %q (%s), want NotAllowed", c.Reason, c.Message)
		}
	})

	t.Run("another pod's UID", func(t *testing.T) {
		// The allowed pod's name and service account, but the UID of a
		// pod that is not (or no longer) it.
		imposter := pods[allowedSA].DeepCopy()
		imposter.UID = pods[otherSA].UID
		request(t, "wrong-uid", imposter, sas[allowedSA], p256(t), 86400)
		pcr := waitPCR(t, admin, ns, "wrong-uid", certificatesv1.PodCertificateRequestConditionTypeDenied)
		if c := pcrCondition(pcr, certificatesv1.PodCertificateRequestConditionTypeDenied); c.Reason != "IdentityMismatch" {
			t.Errorf("Denied reason %q (%s), want IdentityMismatch", c.Reason, c.Message)
		}
	})

	t.Run("a pod that asks for no certificate", func(t *testing.T) {
		// What anyone but the pod's node could ask for: the identity of
		// a real pod with real UIDs, for their own key.
		request(t, "bare", pods["bare"], sas[allowedSA], p256(t), 86400)
		pcr := waitPCR(t, admin, ns, "bare", certificatesv1.PodCertificateRequestConditionTypeDenied)
		if c := pcrCondition(pcr, certificatesv1.PodCertificateRequestConditionTypeDenied); c.Reason != "IdentityMismatch" || !strings.Contains(c.Message, "no podCertificate volume") {
			t.Errorf("Denied %q (%s), want IdentityMismatch for a pod without the volume", c.Reason, c.Message)
		}
	})

	t.Run("key type not accepted", func(t *testing.T) {
		key, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		request(t, "p384", pods[allowedSA], sas[allowedSA], key, 86400)
		pcr := waitPCR(t, admin, ns, "p384", certificatesv1.PodCertificateRequestConditionTypeDenied)
		if c := pcrCondition(pcr, certificatesv1.PodCertificateRequestConditionTypeDenied); c.Reason != "UnsupportedKeyType" {
			t.Errorf("Denied reason %q (%s), want UnsupportedKeyType", c.Reason, c.Message)
		}
	})
}

// waitPCR waits until a PodCertificateRequest is Issued, Denied or Failed
// and fails unless it is want.
func waitPCR(t *testing.T, admin kubernetes.Interface, ns, name, want string) *certificatesv1.PodCertificateRequest {
	t.Helper()
	var pcr *certificatesv1.PodCertificateRequest
	framework.Eventually(t, 60*time.Second, "PodCertificateRequest "+ns+"/"+name+" "+want, func(ctx context.Context) error {
		got, err := admin.CertificatesV1().PodCertificateRequests(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return framework.Permanent(err)
		}
		if err != nil {
			return err
		}
		for _, c := range got.Status.Conditions {
			if c.Status != metav1.ConditionTrue {
				continue
			}
			if c.Type != want {
				return framework.Permanent(fmt.Errorf("%s (reason %s: %s), want %s", c.Type, c.Reason, c.Message, want))
			}
			pcr = got
			return nil
		}
		return fmt.Errorf("not decided yet: %+v", got.Status)
	})
	return pcr
}

func pcrCondition(pcr *certificatesv1.PodCertificateRequest, typ string) *metav1.Condition {
	for i := range pcr.Status.Conditions {
		if pcr.Status.Conditions[i].Type == typ {
			return &pcr.Status.Conditions[i]
		}
	}
	return nil
}
