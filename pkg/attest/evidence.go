package attest

import (
	"crypto/x509"
	"encoding/asn1"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"rekey.io/rekey/pkg/strictpem"
)

// The PEM blocks of a request that carries attestation (Cluster API's
// kubelet authenticator format): after the CERTIFICATE REQUEST, the
// provider's name and its data, an EvidenceV1 in JSON (which PEM carries
// base64-encoded).
const (
	BlockCertificateRequest = "CERTIFICATE REQUEST"
	BlockProvider           = "KUBELET AUTHENTICATOR ATTESTATION PROVIDER"
	BlockData               = "KUBELET AUTHENTICATOR ATTESTATION DATA"
	// ProviderTPM is the provider block's content for TPM evidence.
	ProviderTPM = "tpm"
	// EvidenceVersionV1 is EvidenceV1's version field.
	EvidenceVersionV1 = "rekey.io/tpm/v1"
	// MaxEvidenceSize caps the decoded evidence before JSON parsing.
	MaxEvidenceSize = 16 << 10
)

// OIDProviderID is the X.509 extension of the CSR that holds the node's
// provider ID (KubernetesNodeProviderIdentifierOID).
var OIDProviderID = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 11129, 2, 1, 21}

// EvidenceV1 is the TPM evidence a node puts in its CSR. Byte fields are
// base64 in JSON (encoding/json's []byte).
type EvidenceV1 struct {
	Version string `json:"version"`
	// Secret is what ActivateCredential recovered from the node's
	// NodeAttestation challenge.
	Secret []byte `json:"secret"`
	// Quote (TPMS_ATTEST) and Signature (TPMT_SIGNATURE) as TPM2_Quote
	// returned them, made with the AK of the NodeAttestation.
	Quote     []byte `json:"quote"`
	Signature []byte `json:"signature"`
	// PCRBank is "sha256"; PCRs are the values the node read, by index.
	PCRBank string            `json:"pcrBank"`
	PCRs    map[string][]byte `json:"pcrs"`
}

// Request is a CSR with its attestation, read from spec.request.
type Request struct {
	CSR        *x509.CertificateRequest
	ProviderID string
	Provider   string
	Evidence   *EvidenceV1
}

// ParseRequest reads a request made of a CERTIFICATE REQUEST block, then
// optionally the provider and data blocks, in that order and nothing else.
// A request without attestation gives a nil Evidence.
func ParseRequest(data []byte) (*Request, error) {
	blocks, err := strictpem.Decode(data, 3)
	if err != nil {
		return nil, err
	}
	if len(blocks) == 0 || blocks[0].Type != BlockCertificateRequest {
		return nil, errors.New("the request must start with a CERTIFICATE REQUEST block")
	}
	csr, err := x509.ParseCertificateRequest(blocks[0].Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing the CERTIFICATE REQUEST: %w", err)
	}
	r := &Request{CSR: csr}
	for _, ext := range csr.Extensions {
		if ext.Id.Equal(OIDProviderID) {
			var id string
			if _, err := asn1.Unmarshal(ext.Value, &id); err != nil {
				return nil, fmt.Errorf("provider ID extension %s: %w", OIDProviderID, err)
			}
			r.ProviderID = id
		}
	}
	switch len(blocks) {
	case 1:
		return r, nil
	case 3:
	default:
		return nil, fmt.Errorf("an attested request has exactly the blocks %s, %s and %s", BlockCertificateRequest, BlockProvider, BlockData)
	}
	if blocks[1].Type != BlockProvider || blocks[2].Type != BlockData {
		return nil, fmt.Errorf("after the %s come %s and %s, in that order (got %s, %s)", BlockCertificateRequest, BlockProvider, BlockData, blocks[1].Type, blocks[2].Type)
	}
	r.Provider = string(blocks[1].Bytes)
	if r.Provider != ProviderTPM {
		return nil, fmt.Errorf("attestation provider %q is not supported (only %q)", r.Provider, ProviderTPM)
	}
	if len(blocks[2].Bytes) > MaxEvidenceSize {
		return nil, fmt.Errorf("attestation data exceeds %d bytes", MaxEvidenceSize)
	}
	var ev EvidenceV1
	if err := json.Unmarshal(blocks[2].Bytes, &ev); err != nil {
		return nil, fmt.Errorf("attestation data: %w", err)
	}
	if ev.Version != EvidenceVersionV1 {
		return nil, fmt.Errorf("attestation data version %q is not %q", ev.Version, EvidenceVersionV1)
	}
	if ev.PCRBank != "sha256" {
		return nil, fmt.Errorf("PCR bank %q is not supported (only sha256)", ev.PCRBank)
	}
	r.Evidence = &ev
	return r, nil
}

// PCRValues returns the evidence's PCR values by index.
func (e *EvidenceV1) PCRValues() (map[int][]byte, error) {
	out := make(map[int][]byte, len(e.PCRs))
	for k, v := range e.PCRs {
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 || i > 23 || strconv.Itoa(i) != k {
			return nil, fmt.Errorf("PCR index %q is not 0-23", k)
		}
		if len(v) != 32 {
			return nil, fmt.Errorf("PCR %d value of %d bytes is not a SHA-256 value", i, len(v))
		}
		out[i] = v
	}
	return out, nil
}

// EncodeRequest appends the attestation blocks to a CSR (DER), as the
// node sends it.
func EncodeRequest(csrDER []byte, ev *EvidenceV1) ([]byte, error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	out := pemBlock(BlockCertificateRequest, csrDER)
	out = append(out, pemBlock(BlockProvider, []byte(ProviderTPM))...)
	return append(out, pemBlock(BlockData, data)...), nil
}
