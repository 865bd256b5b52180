package podcert

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net/url"
	"slices"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/apis/message"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/registry/printers"
)

// Reasons of the Denied and Failed conditions rekey writes (kube's own
// UnsupportedKeyType and InvalidUnverifiedUserAnnotations, and rekey's).
const (
	ReasonIssued                           = "Issued"
	ReasonIdentityMismatch                 = "IdentityMismatch"
	ReasonNotAllowed                       = "NotAllowed"
	ReasonUnsupportedKeyType               = certificatesv1.PodCertificateRequestConditionUnsupportedKeyType
	ReasonInvalidUnverifiedUserAnnotations = certificatesv1.PodCertificateRequestConditionInvalidUserConfig
	ReasonInvalidTemplate                  = "InvalidTemplate"
	// ReasonIssuanceRefused: kube-apiserver refused the status write of
	// the issued certificate.
	ReasonIssuanceRefused = "IssuanceRefused"
)

const (
	// backdate is how far before its issuance a certificate starts: some
	// room for relying parties' clocks, well inside the 5 minutes
	// kube-apiserver allows between notBefore and its own clock (kube's
	// own example signer uses the same).
	backdate = 2 * time.Minute
	// minLifetime is kube-apiserver's floor for an issued certificate.
	minLifetime = time.Hour
	// refreshMargin is how close to notBefore and notAfter kube-apiserver
	// lets beginRefreshAt be.
	refreshMargin = 10 * time.Minute
)

// defaultUsages are a pod certificate's usages when the policy names none.
var defaultUsages = []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth, certv1alpha1.UsageServerAuth}

// outcome is the status to write: a condition and, when Issued, the
// certificate fields.
type outcome struct {
	conditionType, reason, message string
	status                         certificatesv1.PodCertificateRequestStatus
}

func denied(reason, format string, args ...any) *outcome {
	return &outcome{conditionType: certificatesv1.PodCertificateRequestConditionTypeDenied, reason: reason, message: message.Cap(fmt.Sprintf(format, args...))}
}

func failed(reason, format string, args ...any) *outcome {
	return &outcome{conditionType: certificatesv1.PodCertificateRequestConditionTypeFailed, reason: reason, message: message.Cap(fmt.Sprintf(format, args...))}
}

// decide checks the request's identity and the policies and issues; an
// error means nothing was decided.
func (c *Controller) decide(ctx context.Context, signer *certv1alpha1.Signer, pcr *certificatesv1.PodCertificateRequest) (*outcome, error) {
	if out, err := c.checkIdentity(ctx, pcr); out != nil || err != nil {
		return out, err
	}
	p := signer.Spec.HostCluster.PodCertificateRequests
	spec := &pcr.Spec
	if !Allowed(p, pcr.Namespace, spec.ServiceAccountName) {
		return denied(ReasonNotAllowed, "signer %s does not issue certificates to service account %s/%s (spec.hostCluster.podCertificateRequests.allowed)",
			spec.SignerName, pcr.Namespace, spec.ServiceAccountName), nil
	}
	if len(spec.UnverifiedUserAnnotations) > 0 {
		return denied(ReasonInvalidUnverifiedUserAnnotations, "signer %s interprets no unverifiedUserAnnotations; remove userAnnotations from the podCertificate volume source",
			spec.SignerName), nil
	}
	stub, err := x509.ParseCertificateRequest(spec.StubPKCS10Request)
	if err == nil {
		err = stub.CheckSignature()
	}
	if err != nil {
		return failed(authority.ReasonInvalidRequest, "spec.stubPKCS10Request: %v", err), nil
	}
	keyType, err := KeyType(stub.PublicKey)
	if err != nil || (len(p.KeyTypes) > 0 && !slices.Contains(p.KeyTypes, keyType)) {
		return denied(ReasonUnsupportedKeyType, "signer %s accepts key types %v, not %s", spec.SignerName, acceptedKeyTypes(p), describeKey(keyType, err)), nil
	}
	req, out := c.template(p, pcr, stub)
	if out != nil {
		return out, nil
	}
	lifetime := validation.DefaultPodCertificateDuration
	if p.Duration != nil {
		lifetime = p.Duration.Duration
	}
	if spec.MaxExpirationSeconds != nil {
		lifetime = min(lifetime, time.Duration(*spec.MaxExpirationSeconds)*time.Second)
	}
	usages := p.Usages
	if len(usages) == 0 {
		usages = defaultUsages
	}
	seconds := int32(lifetime / time.Second)
	signed, err := c.signing.SignTemplate(ctx, signer, authority.Template{
		Request: req,
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			SignerName: spec.SignerName, Usages: usages, ExpirationSeconds: &seconds,
			Username: "system:serviceaccount:" + pcr.Namespace + ":" + spec.ServiceAccountName,
		},
		Name: "pcr:" + pcr.Namespace + "/" + pcr.Name, UID: string(pcr.UID),
		// One holder per pod: its next request (a refresh, with the same
		// pod UID) renews it, another pod's of the same service account
		// does not.
		Requester: fmt.Sprintf("system:serviceaccount:%s:%s (pod %s, uid %s)", pcr.Namespace, spec.ServiceAccountName, spec.PodName, spec.PodUID),
		Backdate:  backdate, MinLifetime: minLifetime,
	}, authority.PathPodCertificate)
	if err != nil {
		return nil, err
	}
	if f := signed.Failure; f != nil {
		return failed(f.Reason, "%s", f.Message), nil
	}
	leaf := signed.Leaf
	chain := signed.Certificate
	if ca := signed.CA; ca != nil && !bytes.Equal(ca.RawIssuer, ca.RawSubject) {
		// An intermediate CA: relying parties that trust its root need it.
		chain = append(slices.Clip(chain), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})...)
	}
	notBefore, notAfter := metav1.NewTime(leaf.NotBefore), metav1.NewTime(leaf.NotAfter)
	refresh := metav1.NewTime(BeginRefreshAt(leaf.NotBefore, leaf.NotAfter))
	return &outcome{
		conditionType: certificatesv1.PodCertificateRequestConditionTypeIssued, reason: ReasonIssued,
		message: message.Cap(issuedMessage(spec.SignerName, leaf)),
		status: certificatesv1.PodCertificateRequestStatus{
			CertificateChain: string(chain), NotBefore: &notBefore, BeginRefreshAt: &refresh, NotAfter: &notAfter,
		},
	}, nil
}

// issuedMessage names the signer and the serial, as hex of whole bytes
// (openssl's digits, the leading zero kept).
func issuedMessage(signerName string, leaf *x509.Certificate) string {
	return fmt.Sprintf("Issued by signer %s, serial %s", signerName, printers.SerialHex(leaf.SerialNumber))
}

// BeginRefreshAt is halfway through a certificate's life, inside the
// bounds kube-apiserver enforces (10 minutes after notBefore, 10 minutes
// before notAfter); the kubelet adds its own jitter.
func BeginRefreshAt(notBefore, notAfter time.Time) time.Time {
	at := notBefore.Add(notAfter.Sub(notBefore) / 2).Truncate(time.Second)
	if earliest := notBefore.Add(refreshMargin); at.Before(earliest) {
		at = earliest
	}
	if latest := notAfter.Add(-refreshMargin); at.After(latest) {
		at = latest
	}
	return at
}

// checkIdentity compares the request with the live Pod, ServiceAccount
// and Node: it returns a Denied outcome for a mismatch, nil when they are
// the ones named.
func (c *Controller) checkIdentity(ctx context.Context, pcr *certificatesv1.PodCertificateRequest) (*outcome, error) {
	spec := &pcr.Spec
	ns := pcr.Namespace
	pod, err := c.kube.CoreV1().Pods(ns).Get(ctx, spec.PodName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return denied(ReasonIdentityMismatch, "pod %s/%s does not exist", ns, spec.PodName), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", ns, spec.PodName, err)
	}
	switch {
	case pod.UID != spec.PodUID:
		return denied(ReasonIdentityMismatch, "pod %s/%s has UID %s, not spec.podUID %s", ns, spec.PodName, pod.UID, spec.PodUID), nil
	case pod.DeletionTimestamp != nil:
		return denied(ReasonIdentityMismatch, "pod %s/%s is being deleted", ns, spec.PodName), nil
	case pod.Spec.NodeName != string(spec.NodeName):
		return denied(ReasonIdentityMismatch, "pod %s/%s is bound to node %q, not spec.nodeName %q", ns, spec.PodName, pod.Spec.NodeName, spec.NodeName), nil
	case pod.Spec.ServiceAccountName != spec.ServiceAccountName:
		return denied(ReasonIdentityMismatch, "pod %s/%s runs as service account %q, not spec.serviceAccountName %q", ns, spec.PodName,
			pod.Spec.ServiceAccountName, spec.ServiceAccountName), nil
	case !mountsPodCertificate(pod, spec.SignerName):
		// kube-apiserver checks a request against its pod only when a
		// node creates it; anyone else allowed to create requests could
		// name any pod. A pod that asks for no certificate of this signer
		// gets none, whoever asks for it.
		return denied(ReasonIdentityMismatch, "pod %s/%s has no podCertificate volume source for signer %s", ns, spec.PodName, spec.SignerName), nil
	}
	sa, err := c.kube.CoreV1().ServiceAccounts(ns).Get(ctx, spec.ServiceAccountName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return denied(ReasonIdentityMismatch, "service account %s/%s does not exist", ns, spec.ServiceAccountName), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading service account %s/%s: %w", ns, spec.ServiceAccountName, err)
	}
	if sa.UID != spec.ServiceAccountUID {
		return denied(ReasonIdentityMismatch, "service account %s/%s has UID %s, not spec.serviceAccountUID %s", ns, spec.ServiceAccountName,
			sa.UID, spec.ServiceAccountUID), nil
	}
	node, err := c.kube.CoreV1().Nodes().Get(ctx, string(spec.NodeName), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return denied(ReasonIdentityMismatch, "node %s does not exist", spec.NodeName), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading node %s: %w", spec.NodeName, err)
	}
	if node.UID != spec.NodeUID {
		return denied(ReasonIdentityMismatch, "node %s has UID %s, not spec.nodeUID %s", spec.NodeName, node.UID, spec.NodeUID), nil
	}
	return nil, nil
}

// Allowed says whether the policy lets the pods of a service account have
// a certificate.
func Allowed(p *certv1alpha1.PodCertificatePolicy, namespace, serviceAccount string) bool {
	for _, a := range p.Allowed {
		if a.Namespace != "*" && a.Namespace != namespace {
			continue
		}
		if len(a.ServiceAccounts) == 0 || slices.Contains(a.ServiceAccounts, "*") || slices.Contains(a.ServiceAccounts, serviceAccount) {
			return true
		}
	}
	return false
}

// KeyType names a public key as a podCertificate volume source does.
func KeyType(pub any) (certv1alpha1.PodCertificateKeyType, error) {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		switch k.N.BitLen() {
		case 3072:
			return certv1alpha1.PodCertificateKeyRSA3072, nil
		case 4096:
			return certv1alpha1.PodCertificateKeyRSA4096, nil
		}
		return "", fmt.Errorf("an RSA key of %d bits", k.N.BitLen())
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return certv1alpha1.PodCertificateKeyECDSAP256, nil
		case elliptic.P384():
			return certv1alpha1.PodCertificateKeyECDSAP384, nil
		case elliptic.P521():
			return certv1alpha1.PodCertificateKeyECDSAP521, nil
		}
		return "", fmt.Errorf("an ECDSA key on curve %s", k.Curve.Params().Name)
	case ed25519.PublicKey:
		return certv1alpha1.PodCertificateKeyED25519, nil
	}
	return "", fmt.Errorf("a %T key", pub)
}

func describeKey(t certv1alpha1.PodCertificateKeyType, err error) string {
	if err != nil {
		return err.Error()
	}
	return string(t)
}

func acceptedKeyTypes(p *certv1alpha1.PodCertificatePolicy) []certv1alpha1.PodCertificateKeyType {
	if len(p.KeyTypes) > 0 {
		return p.KeyTypes
	}
	return []certv1alpha1.PodCertificateKeyType{
		certv1alpha1.PodCertificateKeyRSA3072, certv1alpha1.PodCertificateKeyRSA4096, certv1alpha1.PodCertificateKeyECDSAP256,
		certv1alpha1.PodCertificateKeyECDSAP384, certv1alpha1.PodCertificateKeyECDSAP521, certv1alpha1.PodCertificateKeyED25519,
	}
}

// maxCommonName is X.509's upper bound on a common name.
const maxCommonName = 64

// template builds what the certificate holds from the policy's templates
// and the stub's public key, or a Failed outcome for a template that
// expands to an invalid name.
func (c *Controller) template(p *certv1alpha1.PodCertificatePolicy, pcr *certificatesv1.PodCertificateRequest, stub *x509.CertificateRequest) (*x509.CertificateRequest, *outcome) {
	spec := &pcr.Spec
	expand := func(t string) string {
		return validation.ExpandTemplate(t, pcr.Namespace, spec.ServiceAccountName, spec.PodName, string(spec.NodeName))
	}
	req := &x509.CertificateRequest{
		PublicKey: stub.PublicKey, PublicKeyAlgorithm: stub.PublicKeyAlgorithm, RawSubjectPublicKeyInfo: stub.RawSubjectPublicKeyInfo,
	}
	if p.CommonName != "" {
		cn := expand(p.CommonName)
		if len(cn) > maxCommonName {
			return nil, failed(ReasonInvalidTemplate, "spec.hostCluster.podCertificateRequests.commonName expands to %q, longer than %d characters", cn, maxCommonName)
		}
		req.Subject = pkix.Name{CommonName: cn}
	}
	for i, t := range p.DNSNames {
		name := expand(t)
		if msgs := k8svalidation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			return nil, failed(ReasonInvalidTemplate, "spec.hostCluster.podCertificateRequests.dnsNames[%d] expands to %q: %s", i, name, msgs[0])
		}
		if !slices.Contains(req.DNSNames, name) {
			req.DNSNames = append(req.DNSNames, name)
		}
	}
	if td := p.SPIFFETrustDomain; td != "" {
		req.URIs = []*url.URL{SPIFFEID(td, pcr.Namespace, spec.ServiceAccountName)}
	}
	return req, nil
}

// SPIFFEID is a service account's SPIFFE ID in a trust domain.
func SPIFFEID(trustDomain, namespace, serviceAccount string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: trustDomain, Path: "/ns/" + namespace + "/sa/" + serviceAccount}
}

// mountsPodCertificate says whether a pod has a podCertificate projected
// volume source of the signer name.
func mountsPodCertificate(pod *corev1.Pod, signerName string) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.PodCertificate != nil && src.PodCertificate.SignerName == signerName {
				return true
			}
		}
	}
	return false
}
