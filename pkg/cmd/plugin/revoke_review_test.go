package plugin

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
)

// Security review (#31): `kubectl rekey revoke NAME` revokes whatever
// certificate the request's status.certificate holds, and the server
// resolves a Revocation by SHA-256 alone. status.certificate is written by
// the request's signer (an external signer: whoever has `sign` on that
// signer name and update on /status; for --host-csr and --pcr, the host
// cluster's signer), and nothing checks that it certifies the request's
// key. The owner of a low-trust signer S can put into one of S's requests
// the certificate of another signer T (a control-plane component's
// client certificate, another team's): when an operator with `revoke` on
// both (rekey.io/* or a security team's role) revokes "the bad request",
// T's certificate is revoked instead (confused deputy; the Revocation's
// status names T's request, not the one the operator named).
//
// The plugin must refuse a request whose certificate does not certify the
// request's own public key (or the API should carry the request the
// operator named and have the server compare it with the record).
func TestRevokeRefusesACertificateThatIsNotTheRequests(t *testing.T) {
	victimPEM, victimSum := testChain(t, "system:kube-controller-manager")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "lowtrust-app"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	planted := &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "bad-app"},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			SignerName: "lowtrust.example.com/apps",
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
		},
		// Set by the external signer of lowtrust.example.com/apps.
		Status: certv1alpha1.CertificateSigningRequestStatus{Certificate: victimPEM},
	}
	client := fake.NewSimpleClientset(planted)
	var out, errOut bytes.Buffer
	cmd := newRevokeCommand(func() (clientset.Interface, error) { return client, nil },
		func() (kubernetes.Interface, error) { return kubefake.NewSimpleClientset(), nil },
		func() (string, error) { return "default", nil },
		genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
	cmd.Flags().StringP("namespace", "n", "", "")
	cmd.SetArgs([]string{"bad-app", "--reason", "key-compromise"})
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	_ = cmd.ExecuteContext(context.Background())
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "revocations" {
			t.Fatalf("revoking request bad-app created a Revocation of another key's certificate (SHA-256 %s, the planted one); out %q", victimSum, out.String())
		}
	}
	if errOut.Len() == 0 {
		t.Errorf("no error said that the request's certificate is not for its key")
	}
}
