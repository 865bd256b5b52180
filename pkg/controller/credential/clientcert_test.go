package credential

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	"rekey.io/rekey/pkg/serveridentity"
)

func clientCertCredential() *rotationv1alpha1.RotatingCredential {
	return &rotationv1alpha1.RotatingCredential{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "db", UID: "uid-1"},
		Spec: rotationv1alpha1.RotatingCredentialSpec{
			RotationInterval: &metav1.Duration{Duration: time.Hour}, GracePeriod: &metav1.Duration{Duration: time.Minute},
			Minter: rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterClientCertificate,
				ClientCertificate: &rotationv1alpha1.ClientCertificateMinter{SignerName: "rekey.io/kube-apiserver-client", CommonName: "app"}}},
	}
}

// plantedRequest is a request named like the credential's generation 1.
func plantedRequest(rc *rotationv1alpha1.RotatingCredential, username, ownerUID string) *certv1alpha1.CertificateSigningRequest {
	return &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: RequestName(rc, 1), UID: "planted",
			Labels: map[string]string{LabelManagedBy: ManagedBy}, Annotations: map[string]string{AnnotationOwner: ownerUID}},
		Spec: certv1alpha1.CertificateSigningRequestSpec{Username: username, SignerName: "rekey.io/kube-apiserver-client"},
	}
}

// The request named like a generation's is deleted (mint repeated after a
// crash) or revoked only when rekey's controllers made it for this
// RotatingCredential. Anyone with create on requests can make one with that
// name, rekey's label and the credential's UID in the annotation; only the
// server sets spec.username, from who created it.
func TestClientCertificateTouchesOnlyItsOwnRequests(t *testing.T) {
	t.Parallel()
	rc := clientCertCredential()
	for name, planted := range map[string]*certv1alpha1.CertificateSigningRequest{
		"another user's request with rekey's label and the UID": plantedRequest(rc, "mallory", string(rc.UID)),
		"rekey's request for another credential":                plantedRequest(rc, serveridentity.UserName, "other-uid"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			client := fake.NewSimpleClientset(planted)
			m := ClientCertificateMinter{Client: client, Wait: time.Second}
			_, err := m.Mint(context.Background(), rc, 1)
			var me *MintError
			if !errors.As(err, &me) || me.Reason != "RequestConflict" {
				t.Fatalf("want RequestConflict, got %v", err)
			}
			if err := m.Revoke(context.Background(), rc, 1); err != nil {
				t.Fatalf("revoke: %v", err)
			}
			got, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), planted.Name, metav1.GetOptions{})
			if err != nil || got.UID != planted.UID {
				t.Fatalf("the planted request is gone or replaced: %v", err)
			}
		})
	}
	t.Run("rekey's own earlier request", func(t *testing.T) {
		t.Parallel()
		own := plantedRequest(rc, serveridentity.UserName, string(rc.UID))
		client := fake.NewSimpleClientset(own)
		m := ClientCertificateMinter{Client: client}
		if err := m.Revoke(context.Background(), rc, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), own.Name, metav1.GetOptions{}); err == nil {
			t.Fatal("rekey's own request was not revoked")
		}
		// Revoking again (nothing left) is fine.
		if err := m.Revoke(context.Background(), rc, 1); err != nil {
			t.Fatal(err)
		}
	})
}

// The minter watches its request after approving it (no polling): the
// certificate the signer writes later is the one minted; a refusal ends
// the mint with the condition's reason and message.
func TestClientCertificateWaitsForTheSigner(t *testing.T) {
	t.Parallel()
	csrs := certv1alpha1.SchemeGroupVersion.WithResource("certificatesigningrequests")
	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		// sign is what the signer does to the approved request.
		sign func(*certv1alpha1.CertificateSigningRequest)
		want string
	}{
		"issued": {sign: func(csr *certv1alpha1.CertificateSigningRequest) { csr.Status.Certificate = certify(t, csr, nil) }},
		"another key": {sign: func(csr *certv1alpha1.CertificateSigningRequest) {
			csr.Status.Certificate = certify(t, csr, &otherKey.PublicKey)
		},
			want: "certifies another key than the one rekey made"},
		"failed": {sign: func(csr *certv1alpha1.CertificateSigningRequest) {
			csr.Status.Conditions = append(csr.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
				Type: certv1alpha1.CertificateFailed, Status: metav1.ConditionTrue, Reason: "SignerPolicy", Message: "the CN is not allowed"})
		}, want: "was Failed (SignerPolicy): the CN is not allowed"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rc := clientCertCredential()
			var issued []byte // what the signer wrote
			signer := &certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: validation.SignerObjectName("rekey.io/kube-apiserver-client")},
				Spec: certv1alpha1.SignerSpec{SignerName: "rekey.io/kube-apiserver-client", CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "clients"}}}
			ca := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "clients"}}
			ca.Status.TrustBundle = "the bundle"
			client := fake.NewSimpleClientset(signer, ca)
			// The signer acts once the minter watches, so that only the
			// watch can bring its answer.
			client.PrependWatchReactor("certificatesigningrequests", func(action k8stesting.Action) (bool, watch.Interface, error) {
				w, err := client.Tracker().Watch(csrs, action.GetNamespace())
				if err != nil {
					return true, nil, err
				}
				obj, err := client.Tracker().Get(csrs, "", RequestName(rc, 1))
				if err != nil {
					return true, nil, err
				}
				csr := obj.(*certv1alpha1.CertificateSigningRequest).DeepCopy()
				tc.sign(csr)
				issued = csr.Status.Certificate
				return true, w, client.Tracker().Update(csrs, csr, "")
			})
			m := ClientCertificateMinter{Client: client, Wait: 10 * time.Second}
			data, err := m.Mint(context.Background(), rc, 1)
			if tc.want != "" {
				var me *MintError
				if !errors.As(err, &me) || me.Reason != "NotIssued" || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want NotIssued with %q", err, tc.want)
				}
				return
			}
			if err != nil || string(data["tls.crt"]) != string(issued) || string(data["ca.crt"]) != "the bundle" {
				t.Fatalf("minted %q, %v", data["tls.crt"], err)
			}
			// One read: deleteOwn's look for an earlier request.
			if n := countGets(client.Actions()); n != 1 {
				t.Fatalf("the request was read %d times: polled, not watched", n)
			}
		})
	}
}

func countGets(actions []k8stesting.Action) int {
	n := 0
	for _, a := range actions {
		if a.GetVerb() == "get" && a.GetResource().Resource == "certificatesigningrequests" {
			n++
		}
	}
	return n
}

// certify is a certificate for the key of csr's request, or for pub when
// not nil (a signer that certified another key), signed by a throwaway CA.
func certify(t *testing.T, csr *certv1alpha1.CertificateSigningRequest, pub crypto.PublicKey) []byte {
	t.Helper()
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil {
		t.Fatal("the request holds no PEM")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if pub == nil {
		pub = req.PublicKey
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(1), Subject: req.Subject,
		NotBefore: now, NotAfter: now.Add(time.Hour)}, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "ca"}}, pub, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
