package credential

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"math/big"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	"rekey.io/rekey/pkg/serveridentity"
)

// testPair is a certificate (PEM), its key (PKCS#8 PEM) and the
// certificate's SHA-256.
func testPair(t *testing.T, notAfter time.Time) (certPEM, keyPEM []byte, sha string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "app"},
		NotBefore: notAfter.Add(-2 * time.Hour), NotAfter: notAfter}, &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}}, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), hex.EncodeToString(sum[:])
}

// requestFor is a PEM PKCS#10 request for the key of keyPEM (testPair's).
func requestFor(t *testing.T, keyPEM []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(keyPEM)
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "app"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func revocationsCreated(client *fake.Clientset) []*certv1alpha1.Revocation {
	var out []*certv1alpha1.Revocation
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "revocations" {
			out = append(out, a.(k8stesting.CreateAction).GetObject().(*certv1alpha1.Revocation))
		}
	}
	return out
}

// At the end of the grace period the previous generation's certificate is
// revoked (reason Superseded), by the SHA-256 of the certificate the
// Secret kept, or of the request's while it exists; then the request goes.
func TestClientCertificateRevokesTheOldCertificate(t *testing.T) {
	t.Parallel()
	rc := clientCertCredential()
	future := time.Now().Add(time.Hour)
	oldCrt, oldKey, oldSHA := testPair(t, future)
	_, otherKey, _ := testPair(t, future)
	expiredCrt, expiredKey, _ := testPair(t, time.Now().Add(-time.Minute))
	reqCrt, reqKey, reqSHA := testPair(t, future)
	ownWithCert := plantedRequest(rc, serveridentity.UserName, string(rc.UID))
	ownWithCert.Spec.Request = requestFor(t, reqKey)
	ownWithCert.Status.Certificate = reqCrt
	// The request's signer (an external one) put another key's
	// certificate in the status.
	ownWithOtherKeys := plantedRequest(rc, serveridentity.UserName, string(rc.UID))
	ownWithOtherKeys.Spec.Request = requestFor(t, otherKey)
	ownWithOtherKeys.Status.Certificate = reqCrt
	plantedWithCert := plantedRequest(rc, "mallory", string(rc.UID))
	plantedWithCert.Status.Certificate = reqCrt
	notFound := apierrors.NewNotFound(certv1alpha1.Resource("revocations"), "")
	notFound.ErrStatus.Message = "no certificate rekey issued has SHA-256 " + oldSHA

	for name, tc := range map[string]struct {
		old         map[string][]byte
		request     *certv1alpha1.CertificateSigningRequest
		createErr   error
		want        []string // SHA-256s revoked
		wantErr     string
		wantRequest bool // the request is left
	}{
		"the Secret's old certificate":               {old: map[string][]byte{"tls.crt": oldCrt, "tls.key": oldKey, "ca.crt": []byte("x")}, want: []string{oldSHA}},
		"the request's certificate, the Secret gone": {request: ownWithCert, want: []string{reqSHA}},
		"the same certificate in both, revoked once": {old: map[string][]byte{"tls.crt": reqCrt, "tls.key": reqKey}, request: ownWithCert, want: []string{reqSHA}},
		"already revoked is done": {old: map[string][]byte{"tls.crt": oldCrt, "tls.key": oldKey},
			createErr: apierrors.NewAlreadyExists(certv1alpha1.Resource("revocations"), oldSHA), want: []string{oldSHA}},
		"a certificate rekey no longer knows is done": {old: map[string][]byte{"tls.crt": oldCrt, "tls.key": oldKey}, createErr: notFound, want: []string{oldSHA}},
		// Only the storage's own answer: a 404 for another reason (a
		// server that does not serve revocations) is retried.
		"another 404 is retried": {old: map[string][]byte{"tls.crt": oldCrt, "tls.key": oldKey},
			createErr: apierrors.NewNotFound(certv1alpha1.Resource("revocations"), oldSHA), want: []string{oldSHA}, wantErr: "RevokeFailed"},
		"a request whose certificate is for another key": {request: ownWithOtherKeys},
		"another failure is retried, the request kept": {old: map[string][]byte{"tls.crt": oldCrt, "tls.key": oldKey}, request: plantedRequest(rc, serveridentity.UserName, string(rc.UID)),
			createErr: apierrors.NewInternalError(errors.New("etcd down")), want: []string{oldSHA}, wantErr: "RevokeFailed", wantRequest: true},
		// Whoever may write the Secret must not have rekey revoke a
		// certificate whose key they do not hold.
		"a certificate without its key in the Secret": {old: map[string][]byte{"tls.crt": oldCrt, "tls.key": otherKey}},
		"another user's request of the name":          {request: plantedWithCert, wantRequest: true},
		"an expired certificate":                      {old: map[string][]byte{"tls.crt": expiredCrt, "tls.key": expiredKey}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			client := fake.NewSimpleClientset()
			if tc.request != nil {
				if err := client.Tracker().Add(tc.request.DeepCopy()); err != nil {
					t.Fatal(err)
				}
			}
			if tc.createErr != nil {
				client.PrependReactor("create", "revocations", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, tc.createErr
				})
			}
			m := ClientCertificateMinter{Client: client}
			err := m.RevokeWithOld(context.Background(), rc, 1, tc.old)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
			var got []string
			for _, rev := range revocationsCreated(client) {
				if rev.Name != rev.Spec.CertificateSHA256 || rev.Spec.Reason != certv1alpha1.RevocationReasonSuperseded || rev.Spec.SerialNumber != "" ||
					rev.Annotations[AnnotationRevokedGeneration] != "team/db generation 1" {
					t.Fatalf("revocation %+v", rev)
				}
				got = append(got, rev.Spec.CertificateSHA256)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("revoked %v, want %v", got, tc.want)
			}
			if tc.request != nil {
				_, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), tc.request.Name, metav1.GetOptions{})
				if (err == nil) != tc.wantRequest {
					t.Fatalf("request left %v, want %v", err == nil, tc.wantRequest)
				}
			}
		})
	}
}

// oldValuesRecorder records what the controller hands a minter that
// revokes by the old values.
type oldValuesRecorder struct {
	revokeRecorder
	mu  sync.Mutex
	old []map[string][]byte
}

func (m *oldValuesRecorder) RevokeWithOld(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, generation int64, old map[string][]byte) error {
	m.mu.Lock()
	m.old = append(m.old, old)
	m.mu.Unlock()
	return m.Revoke(ctx, rc, generation)
}

// The controller hands the minter the values the Secret kept for the
// grace period (under their own names), at its end.
func TestRevokeStepHandsTheOldValues(t *testing.T) {
	m := &oldValuesRecorder{}
	h := newHarness(t, newRC(), m)
	if _, err := h.settle(); err != nil {
		t.Fatal(err)
	}
	first := string(h.secretData()["token"])
	h.clock.SetTime(t0.Add(time.Hour))
	if _, err := h.settle(); err != nil {
		t.Fatal(err)
	}
	h.clock.SetTime(t0.Add(time.Hour + 11*time.Minute))
	if _, err := h.settle(); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.old) != 1 || string(m.old[0]["token"]) != first || len(m.old[0]) != 1 {
		t.Fatalf("old values handed: %d calls", len(m.old))
	}
	if _, ok := h.secretData()["token"+OldSuffix]; ok {
		t.Fatal("the old value outlived its revocation")
	}
}
