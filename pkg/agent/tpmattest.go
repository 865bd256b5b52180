package agent

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/agent/tpmnode"
	attv1alpha1 "rekey.io/rekey/pkg/apis/attestation/v1alpha1"
	"rekey.io/rekey/pkg/attest"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

// TPMAttestor makes a node's requests carry TPM evidence: it posts the
// node's EK and AK in its NodeAttestation, asks for a challenge, recovers
// its secret with the TPM and quotes the PCRs the challenge names, bound to
// the secret and the request's key.
type TPMAttestor struct {
	// Open opens the TPM for one attestation (closed after it).
	Open func() (*tpmnode.Device, error)
	// Node names the NodeAttestation; Policy is its AttestationPolicy.
	Node, Policy string
	// Dir keeps the AK (tpmnode.LoadOrCreateAK), so that it survives
	// restarts.
	Dir string
	// EK is which EK to use: RSA (the default) or ECC.
	EK tpmnode.EKType
}

// AttestationRefusal is a challenge the server refused: the EK, the AK or
// the policy (the message says which); asking again does not help until
// that changes.
type AttestationRefusal struct{ Err error }

func (e *AttestationRefusal) Error() string {
	return "TPM attestation refused: " + e.Err.Error()
}
func (e *AttestationRefusal) Unwrap() error { return e.Err }

// Request returns spec.request for a CSR (PEM) of key: the CSR followed by
// the attestation blocks.
func (a *TPMAttestor) Request(ctx context.Context, client clientset.Interface, csrPEM []byte, key crypto.PublicKey) ([]byte, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil {
		return nil, errors.New("the certificate request is not PEM")
	}
	spki, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return nil, err
	}
	dev, err := a.Open()
	if err != nil {
		return nil, err
	}
	defer func() { _ = dev.Close() }()

	// swtpm holds three transient objects: the AK is made or loaded (with
	// its parent, flushed at once) before the EK is loaded.
	ak, err := dev.LoadOrCreateAK(a.Dir)
	if err != nil {
		return nil, err
	}
	defer dev.Flush(ak.Handle)
	ekType := a.EK
	if ekType == "" {
		ekType = tpmnode.EKRSA
	}
	ek, err := dev.EKOf(ekType)
	if err != nil {
		return nil, err
	}
	defer dev.Flush(ek.Handle)
	// An EK certificate is optional: a policy may allow the EK by its key.
	ekCert, certErr := dev.EKCertificateOf(ekType)
	if certErr != nil {
		klog.FromContext(ctx).V(2).Info("No EK certificate in the TPM; the policy must allow the EK by its key hash", "err", certErr.Error())
	}

	spec := attv1alpha1.NodeAttestationSpec{PolicyName: a.Policy, EKCertificate: ekCert, EKPublic: ek.Public, AKPublic: ak.Public}
	if err := a.post(ctx, client, spec); err != nil {
		return nil, err
	}
	na, err := client.AttestationV1alpha1().NodeAttestations().Challenge(ctx, a.Node, &attv1alpha1.ChallengeRequest{}, metav1.CreateOptions{FieldManager: "rekey-agent"})
	if apierrors.IsForbidden(err) {
		// Either the server refused the EK or AK (its message says why)
		// or RBAC refused the call; both are the operator's to fix.
		return nil, &AttestationRefusal{Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("asking for a challenge: %w", err)
	}
	c := na.Status.Challenge
	if c == nil {
		return nil, fmt.Errorf("NodeAttestation %s has no challenge (phase %q)", a.Node, na.Status.Phase)
	}
	secret, err := dev.ActivateCredential(ak, ek, c.CredentialBlob, c.EncryptedSecret)
	if err != nil {
		return nil, err
	}
	// The EK's slot is needed no more; quoting needs none.
	selection := make([]int, len(c.PCRSelection))
	for i, p := range c.PCRSelection {
		selection[i] = int(p)
	}
	quote, sig, values, err := dev.Quote(ak, attest.QualifyingData(secret, spki), selection)
	if err != nil {
		return nil, err
	}
	pcrs := make(map[string][]byte, len(values))
	for i, v := range values {
		pcrs[strconv.Itoa(i)] = v
	}
	return attest.EncodeRequest(block.Bytes, &attest.EvidenceV1{
		Version: attest.EvidenceVersionV1, Secret: secret, Quote: quote, Signature: sig, PCRBank: "sha256", PCRs: pcrs,
	})
}

// post creates the node's NodeAttestation, or updates its spec when the
// EK, the AK or the policy differ from what the TPM has now.
func (a *TPMAttestor) post(ctx context.Context, client clientset.Interface, spec attv1alpha1.NodeAttestationSpec) error {
	nas := client.AttestationV1alpha1().NodeAttestations()
	current, err := nas.Get(ctx, a.Node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = nas.Create(ctx, &attv1alpha1.NodeAttestation{ObjectMeta: metav1.ObjectMeta{Name: a.Node}, Spec: spec}, metav1.CreateOptions{FieldManager: "rekey-agent"})
		if err != nil {
			return fmt.Errorf("creating NodeAttestation %s: %w", a.Node, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading NodeAttestation %s: %w", a.Node, err)
	}
	if current.Spec.PolicyName == spec.PolicyName && bytes.Equal(current.Spec.EKCertificate, spec.EKCertificate) &&
		bytes.Equal(current.Spec.EKPublic, spec.EKPublic) && bytes.Equal(current.Spec.AKPublic, spec.AKPublic) {
		return nil
	}
	current.Spec = spec
	if _, err := nas.Update(ctx, current, metav1.UpdateOptions{FieldManager: "rekey-agent"}); err != nil {
		return fmt.Errorf("updating NodeAttestation %s: %w", a.Node, err)
	}
	return nil
}
