package policy

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
)

// BuiltInMaxDuration is the longest lifetime the built-in signers grant,
// the same default as kube-controller-manager's signing duration.
const BuiltInMaxDuration = 365 * 24 * time.Hour

// BuiltIn is a built-in signer and the CA it signs with.
type BuiltIn struct {
	Signer certv1alpha1.Signer
	CA     rotationv1alpha1.CertificateAuthority
}

var (
	clientUsages  = []certv1alpha1.KeyUsage{certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth}
	servingUsages = []certv1alpha1.KeyUsage{certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageServerAuth}
	nodeSubject   = certv1alpha1.SubjectPolicy{CommonNamePrefix: "system:node:", Organizations: []string{"system:nodes"}}
)

// Policies of the built-in signers, after their kubernetes.io counterparts
// in the Certificates API design (seed 003).
var (
	KubeAPIServerClientPolicy = certv1alpha1.SignerPolicy{
		AllowedUsages:   []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth},
		RequiredUsages:  []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth},
		MaxDuration:     metav1.Duration{Duration: BuiltInMaxDuration},
		Subject:         certv1alpha1.SubjectPolicy{ForbiddenOrganizations: []string{"system:masters"}},
		SubjectAltNames: certv1alpha1.SubjectAltNamePolicy{Allowed: []certv1alpha1.SubjectAltNameType{certv1alpha1.SANTypeDNS, certv1alpha1.SANTypeIP, certv1alpha1.SANTypeEmail, certv1alpha1.SANTypeURI}},
	}
	KubeletClientPolicy = certv1alpha1.SignerPolicy{
		AllowedUsages:  clientUsages,
		RequiredUsages: clientUsages,
		MaxDuration:    metav1.Duration{Duration: BuiltInMaxDuration},
		Subject:        nodeSubject,
	}
	// KubeletServingPolicy adds to its kubernetes.io counterpart what a
	// serving certificate for a node needs: the node asks in its own name
	// only, says nothing else in the subject, and names no wildcard host.
	KubeletServingPolicy = certv1alpha1.SignerPolicy{
		AllowedUsages:  servingUsages,
		RequiredUsages: servingUsages,
		MaxDuration:    metav1.Duration{Duration: BuiltInMaxDuration},
		Subject: certv1alpha1.SubjectPolicy{CommonNamePrefix: nodeSubject.CommonNamePrefix, Organizations: nodeSubject.Organizations,
			CommonNameIsRequester: true, ForbidOtherAttributes: true},
		SubjectAltNames: certv1alpha1.SubjectAltNamePolicy{Allowed: []certv1alpha1.SubjectAltNameType{certv1alpha1.SANTypeDNS, certv1alpha1.SANTypeIP}, RequireDNSOrIP: true},
	}
)

// BuiltIns returns the built-in signers and their CAs, which the server
// creates on first start. Their CAs keep keys in the Etcd key store.
// rekey.io/kubelet-serving approves against the Node (NodeServing) when
// there is a host cluster to read Nodes from, and waits for a person
// otherwise. rekey.io/insecure-test (development only: it approves every
// node client request without verifying anything) is among them only when
// insecureTest is set.
// InsecureTestSignerName is the development signer that approves without
// verifying (seed 004's null attestor).
const InsecureTestSignerName = "rekey.io/insecure-test"

func BuiltIns(hostCluster, insecureTest bool) []BuiltIn {
	servingMode := certv1alpha1.ApprovalManual
	if hostCluster {
		servingMode = certv1alpha1.ApprovalNodeServing
	}
	specs := []struct {
		name   string
		policy certv1alpha1.SignerPolicy
		mode   certv1alpha1.ApprovalMode
	}{
		{"rekey.io/kube-apiserver-client", KubeAPIServerClientPolicy, certv1alpha1.ApprovalManual},
		{"rekey.io/kube-apiserver-client-kubelet", KubeletClientPolicy, certv1alpha1.ApprovalNodeClient},
		{"rekey.io/kubelet-serving", KubeletServingPolicy, servingMode},
		{"rekey.io/kube-apiserver-client-kubelet-tpm", KubeletClientPolicy, certv1alpha1.ApprovalAttestation},
		{"rekey.io/kubelet-serving-tpm", KubeletServingPolicy, certv1alpha1.ApprovalAttestation},
	}
	if insecureTest {
		specs = append(specs, struct {
			name   string
			policy certv1alpha1.SignerPolicy
			mode   certv1alpha1.ApprovalMode
		}{InsecureTestSignerName, KubeletClientPolicy, certv1alpha1.ApprovalAttestation})
	}
	out := make([]BuiltIn, 0, len(specs))
	for _, s := range specs {
		caName := strings.Replace(s.name, "/", "-", 1)
		out = append(out, BuiltIn{
			Signer: certv1alpha1.Signer{
				ObjectMeta: metav1.ObjectMeta{Name: strings.Replace(s.name, "/", ":", 1), Labels: map[string]string{"rekey.io/built-in": "true"}},
				Spec: certv1alpha1.SignerSpec{
					SignerName:              s.name,
					CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: caName},
					Policy:                  *s.policy.DeepCopy(),
					Approval:                certv1alpha1.SignerApproval{Mode: s.mode},
				},
			},
			CA: rotationv1alpha1.CertificateAuthority{
				ObjectMeta: metav1.ObjectMeta{Name: caName, Labels: map[string]string{"rekey.io/built-in": "true"}},
				Spec: rotationv1alpha1.CertificateAuthoritySpec{
					CommonName:   s.name + " CA",
					KeyAlgorithm: rotationv1alpha1.ECDSAP256,
					Validity:     metav1.Duration{Duration: rotationv1alpha1.DefaultValidity},
					KeyStore:     rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd},
				},
			},
		})
	}
	return out
}
