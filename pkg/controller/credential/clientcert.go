package credential

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/admission/requestnames"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/csrwait"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/quietlog"
	"rekey.io/rekey/pkg/serveridentity"
	"rekey.io/rekey/pkg/signing"
)

// ClientCertificateMinter makes a key pair in rekey and has a rekey Signer
// certify it: a request named after the RotatingCredential and the
// generation, approved by rekey (the RotatingCredentialMinter admission
// plugin required approve on the signer of whoever wrote the minter). The
// key never leaves the process except into the Secret, so a mint repeated
// after a crash cannot reuse the lost key: it deletes the generation's
// earlier request (its certificate is unusable without the key) and asks
// again (only a request rekey itself made: see deleteOwn). Revoking
// revokes the certificate (a Revocation, reason Superseded: kube-apiserver
// refuses it through rekey's authorization webhook, and the CA's CRL lists
// it), then deletes the request.
type ClientCertificateMinter struct {
	Client clientset.Interface
	// Wait bounds the wait for the certificate (default 30s).
	Wait time.Duration
}

// RequestName is the certificate request of a generation. The name is
// predictable, so its prefix is reserved to rekey's controllers (admission
// plugin RotatingCredentialRequestNames): no one else can plant a request
// of that name and so block the credential's rotation (RequestConflict).
func RequestName(rc *rotationv1alpha1.RotatingCredential, generation int64) string {
	return fmt.Sprintf("%s%s.%s.g%d", requestnames.Prefix, rc.Namespace, rc.Name, generation)
}

// Mint implements Minter.
func (m ClientCertificateMinter) Mint(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, generation int64) (map[string][]byte, error) {
	ctx = quietlog.Context(ctx) // carries a credential: never dump it (package quietlog)
	spec := rc.Spec.Minter.ClientCertificate
	if spec == nil {
		return nil, &MintError{Reason: "InvalidSpec", Err: fmt.Errorf("no clientCertificate block")}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, &MintError{Reason: "KeyFailed", Err: err}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: spec.CommonName, Organization: spec.Organizations}}, key)
	if err != nil {
		return nil, &MintError{Reason: "KeyFailed", Err: err}
	}
	duration := rc.Spec.RotationInterval.Duration + rc.Spec.GracePeriod.Duration
	if spec.Duration != nil {
		duration = spec.Duration.Duration
	}
	seconds := int32(max(duration, 10*time.Minute) / time.Second)
	csrs := m.Client.CertificatesV1alpha1().CertificateSigningRequests()
	name := RequestName(rc, generation)
	if err := m.deleteOwn(ctx, rc, name); err != nil {
		return nil, err
	}
	csr, err := csrs.Create(ctx, &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelManagedBy: ManagedBy},
			Annotations: map[string]string{AnnotationOwner: string(rc.UID)}},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), SignerName: spec.SignerName,
			ExpirationSeconds: &seconds, Usages: []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth},
		},
	}, metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil {
		return nil, &MintError{Reason: "RequestFailed", Err: fmt.Errorf("creating request %s: %w", name, err)}
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
		Type: certv1alpha1.CertificateApproved, Status: metav1.ConditionTrue, Reason: "RotatingCredential",
		Message: fmt.Sprintf("Approved for RotatingCredential %s/%s generation %d, whose minter's writer may approve for %s.", rc.Namespace, rc.Name, generation, spec.SignerName),
	})
	created := csr.UID
	if csr, err = csrs.UpdateApproval(ctx, name, csr, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
		return nil, &MintError{Reason: "ApprovalFailed", Err: fmt.Errorf("approving request %s: %w", name, err)}
	}
	certPEM, err := m.waitForCertificate(ctx, csr, created)
	if err != nil {
		return nil, &MintError{Reason: "NotIssued", Err: fmt.Errorf("waiting for the certificate of request %s: %w", name, err)}
	}
	// tls.crt must go with tls.key: a signer that certified another key
	// (a bug, or someone else's certificate) would leave a Secret no
	// client can use.
	if err := certifiesKey(certPEM, &key.PublicKey); err != nil {
		return nil, &MintError{Reason: "NotIssued", Err: fmt.Errorf("the certificate of request %s: %w", name, err)}
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, &MintError{Reason: "KeyFailed", Err: err}
	}
	ca, err := m.trustBundle(ctx, spec.SignerName)
	if err != nil {
		return nil, &MintError{Reason: "NoTrustBundle", Err: err}
	}
	return map[string][]byte{
		"tls.crt": certPEM,
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		"ca.crt":  []byte(ca),
	}, nil
}

// waitForCertificate returns the certificate of the request made as
// created (its UID): from the approval's answer when the signer issued it
// synchronously, else by watching the request until it is issued, refused,
// deleted or replaced (someone else's request of that name: its certificate
// is not for this key), or Wait passes.
func (m ClientCertificateMinter) waitForCertificate(ctx context.Context, csr *certv1alpha1.CertificateSigningRequest, created types.UID) ([]byte, error) {
	if done, certPEM, err := csrwait.Decided(csr); done && csr.UID == created {
		return certPEM, err
	}
	timeout := m.Wait
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return csrwait.WaitForCertificate(ctx, m.Client, csr.Name, created)
}

// certifiesKey checks that the first certificate of chain (PEM) is for
// pub.
func certifiesKey(chain []byte, pub crypto.PublicKey) error {
	block, _ := pem.Decode(chain)
	if block == nil || block.Type != "CERTIFICATE" {
		return errors.New("it is not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("parsing it: %w", err)
	}
	if !signing.PublicKeysEqual(pub, cert.PublicKey) {
		return errors.New("it certifies another key than the one rekey made for it")
	}
	return nil
}

// trustBundle is the signer's CA trust bundle (old and new CA during its
// rotation).
func (m ClientCertificateMinter) trustBundle(ctx context.Context, signerName string) (string, error) {
	signer, err := m.Client.CertificatesV1alpha1().Signers().Get(ctx, validation.SignerObjectName(signerName), metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading the Signer of %s: %w", signerName, err)
	}
	ca, err := m.Client.RotationV1alpha1().CertificateAuthorities().Get(ctx, signer.Spec.CertificateAuthorityRef.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading the CertificateAuthority of %s: %w", signerName, err)
	}
	return ca.Status.TrustBundle, nil
}

// Revoke implements Minter, without the Secret's old values (only the
// generation's request, while it exists, names the certificate).
func (m ClientCertificateMinter) Revoke(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, generation int64) error {
	return m.RevokeWithOld(ctx, rc, generation, nil)
}

// RevokeWithOld implements OldValuesRevoker: the generation's certificate
// is revoked (reason Superseded), then its request deleted. The
// certificate is found in old, the values the Secret kept for the grace
// period ("tls.crt" and "tls.key"), and in the generation's request while
// it exists (the cleaner deletes issued requests after an hour, so for a
// grace period of more than that the Secret is where it is). The Secret's
// certificate is trusted only with its key: the ".old" keys are not under
// the checksum, and whoever may write the Secret must not make rekey, as
// its controllers, revoke someone else's certificate; holding a
// certificate's key is proof enough to revoke it. A request of that name
// that rekey did not make for this RotatingCredential is not this
// generation's and is left alone (this generation's was then never made:
// the name was taken).
//
// Every step may be repeated (the controller repeats the Revoke step until
// the Secret shows it done): a Revocation that exists already, or a
// certificate rekey no longer knows (expired, its record pruned: nothing
// left to revoke), is done.
func (m ClientCertificateMinter) RevokeWithOld(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, generation int64, old map[string][]byte) error {
	ctx = quietlog.Context(ctx) // carries a credential: never dump it (package quietlog)
	name := RequestName(rc, generation)
	var certs []*x509.Certificate
	if cert := certificateOfPair(old["tls.crt"], old["tls.key"]); cert != nil {
		certs = append(certs, cert)
	}
	csr, err := m.Client.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return &MintError{Reason: "RevokeFailed", Err: fmt.Errorf("reading request %s: %w", name, err)}
	case ownRequest(csr, rc):
		if cert := certificateOfRequest(csr); cert != nil {
			certs = append(certs, cert)
		}
	}
	done := map[string]bool{}
	for _, cert := range certs {
		sha := certificateSHA256(cert)
		if done[sha] {
			continue
		}
		done[sha] = true
		if err := m.revokeCertificate(ctx, rc, generation, cert, sha); err != nil {
			return err
		}
	}
	if len(certs) == 0 {
		klog.FromContext(ctx).V(2).Info("No certificate of the generation left to revoke (the Secret and the request no longer hold it)",
			"rotatingCredential", klog.KObj(rc), "generation", generation)
	}
	err = m.deleteOwn(ctx, rc, name)
	var me *MintError
	if errors.As(err, &me) && me.Reason == "RequestConflict" {
		return nil
	}
	return err
}

// revokeCertificate creates the Revocation of cert as rekey's controllers.
func (m ClientCertificateMinter) revokeCertificate(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, generation int64, cert *x509.Certificate, sha string) error {
	if time.Now().After(cert.NotAfter) {
		// Expired: refused everywhere already, and rekey has forgotten it.
		return nil
	}
	_, err := m.Client.CertificatesV1alpha1().Revocations().Create(ctx, &certv1alpha1.Revocation{
		ObjectMeta: metav1.ObjectMeta{Name: sha, Labels: map[string]string{LabelManagedBy: ManagedBy},
			Annotations: map[string]string{AnnotationOwner: string(rc.UID), AnnotationRevokedGeneration: fmt.Sprintf("%s/%s generation %d", rc.Namespace, rc.Name, generation)}},
		Spec: certv1alpha1.RevocationSpec{CertificateSHA256: sha, Reason: certv1alpha1.RevocationReasonSuperseded},
	}, metav1.CreateOptions{FieldManager: fieldManager})
	switch {
	case err == nil:
		klog.FromContext(ctx).Info("Revoked the previous generation's certificate", "rotatingCredential", klog.KObj(rc), "generation", generation,
			"certificateSHA256", sha, "notAfter", cert.NotAfter.UTC())
		return nil
	case apierrors.IsAlreadyExists(err):
		return nil
	case notIssued(err):
		// The server has no record of it: expired meanwhile (records of
		// expired certificates are pruned), or its CA key destroyed.
		return nil
	}
	return &MintError{Reason: "RevokeFailed", Err: fmt.Errorf("revoking the certificate of generation %d (SHA-256 %s): %w", generation, sha, err)}
}

// notIssued says whether err is the Revocation storage's answer for a
// certificate rekey has no issuance record of
// (pkg/registry/certificates/revocation: 404 with details group
// certificates.rekey.io, kind revocations, no name, and this message).
// Any other 404 is retried: it also comes from a server that does not serve
// revocations (a replica of an earlier version during a rolling upgrade:
// the aggregator may send the create to any replica), and taking it for
// "nothing left to revoke" would leave the certificate never revoked.
func notIssued(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	st := status.Status()
	return st.Details != nil && st.Details.Group == certv1alpha1.GroupName && st.Details.Kind == "revocations" && st.Details.Name == "" &&
		strings.HasPrefix(st.Message, "no certificate rekey issued has ")
}

// certificateOfRequest is the leaf of the request's certificate when it
// certifies the request's own key, else nil. The status is written by the
// request's signer, which may be an external one: a certificate of another
// key there (another signer's, a control-plane component's) must not be
// revoked by rekey's controllers in this generation's name.
func certificateOfRequest(csr *certv1alpha1.CertificateSigningRequest) *x509.Certificate {
	issued, err := validation.ParseCertificateChain(csr.Status.Certificate)
	if err != nil || len(issued) == 0 {
		return nil
	}
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != validation.CertificateRequestPEMType {
		return nil
	}
	request, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil || !signing.PublicKeysEqual(request.PublicKey, issued[0].PublicKey) {
		return nil
	}
	return issued[0]
}

// AnnotationRevokedGeneration, on a Revocation rekey made, names the
// RotatingCredential and generation whose certificate it revokes.
const AnnotationRevokedGeneration = "rotation.rekey.io/revoked-generation"

// certificateOfPair is the leaf of certPEM when keyPEM is its private key,
// else nil.
func certificateOfPair(certPEM, keyPEM []byte) *x509.Certificate {
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return nil
	}
	certs, err := validation.ParseCertificateChain(certPEM)
	if err != nil || len(certs) == 0 {
		return nil
	}
	key, err := signing.ParsePrivateKeyPEM(keyPEM)
	if err != nil || !signing.PublicKeysEqual(key.Public(), certs[0].PublicKey) {
		return nil
	}
	return certs[0]
}

func certificateSHA256(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// ownRequest says whether rekey's controllers made csr for rc (see
// deleteOwn).
func ownRequest(csr *certv1alpha1.CertificateSigningRequest, rc *rotationv1alpha1.RotatingCredential) bool {
	return csr.Spec.Username == serveridentity.UserName && csr.Annotations[AnnotationOwner] == string(rc.UID)
}

// deleteOwn deletes the request name if rekey's controllers made it for
// rc, and refuses (RequestConflict) if someone else did. Ownership is what
// only the server writes: spec.username, the identity that created the
// request, is the controllers' own (serveridentity.UserName), and the
// owner annotation, written with it, is rc's UID. A label or annotation
// alone proves nothing: whoever may create requests can set them. The
// delete carries the UID read as its precondition, so a request replaced
// in between is not deleted either.
func (m ClientCertificateMinter) deleteOwn(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, name string) error {
	csrs := m.Client.CertificatesV1alpha1().CertificateSigningRequests()
	existing, err := csrs.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return &MintError{Reason: "RequestFailed", Err: fmt.Errorf("reading the earlier request %s: %w", name, err)}
	}
	if !ownRequest(existing, rc) {
		return &MintError{Reason: "RequestConflict", Err: fmt.Errorf("the request %s exists and was not made by rekey for this RotatingCredential; rekey leaves it alone (delete it to let this generation be minted)", name)}
	}
	uid := existing.UID
	err = csrs.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return &MintError{Reason: "RequestFailed", Err: fmt.Errorf("removing the earlier request %s: %w", name, err)}
	}
	return nil
}

// IssuerRotated says whether a Secret's tls.crt was signed by another CA
// than the signer's current one (its CA rotation started): the credential
// is then renewed at once.
func IssuerRotated(tlsCrt []byte, currentCA *x509.Certificate) bool {
	block, _ := pem.Decode(tlsCrt)
	if block == nil || currentCA == nil {
		return false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return false
	}
	return cert.CheckSignatureFrom(currentCA) != nil
}
