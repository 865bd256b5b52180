package validation

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync/atomic"

	"rekey.io/rekey/pkg/attest"
	"rekey.io/rekey/pkg/strictpem"
)

var (
	errRequestTooLarge     = fmt.Errorf("request is larger than %d bytes", MaxRequestBytes)
	errCertificateTooLarge = fmt.Errorf("certificate data is larger than %d bytes", MaxCertificateBytes)
)

// CertificateRequestPEMType is the only PEM type accepted in spec.request.
const CertificateRequestPEMType = "CERTIFICATE REQUEST"

// ParseCSR decodes spec.request: one "CERTIFICATE REQUEST" PEM block
// without headers, whose PKCS#10 self-signature verifies, optionally
// followed by the attestation provider and data blocks of a TPM-attested
// request. Nothing but whitespace may surround the blocks. The size is
// checked first.
//
// A request that passes is kept for ParseStoredCSR: admission and the
// decision that follow validation in the same create read it from there.
func ParseCSR(data []byte) (*x509.CertificateRequest, error) {
	csr, err := parseCSR(data, true)
	if err == nil {
		keepParsed(data, csr)
	}
	return csr, err
}

func parseCSR(data []byte, verify bool) (*x509.CertificateRequest, error) {
	if len(data) == 0 {
		return nil, errors.New("request is empty")
	}
	if len(data) > MaxRequestBytes {
		return nil, errRequestTooLarge
	}
	// One strict reading: what an approver inspects with openssl is what
	// is signed (see package strictpem). The CERTIFICATE REQUEST block may
	// be followed by the two blocks of TPM attestation evidence (package
	// attest), which are checked as a whole.
	blocks, err := strictpem.Decode(data, 3)
	if err != nil {
		return nil, err
	}
	var csr *x509.CertificateRequest
	switch {
	case len(blocks) == 0:
		return nil, fmt.Errorf("must be a PEM block of type %q (no PEM data found)", CertificateRequestPEMType)
	case blocks[0].Type != CertificateRequestPEMType:
		return nil, fmt.Errorf("PEM block type must be %q, got %q", CertificateRequestPEMType, blocks[0].Type)
	case len(blocks) > 1 && blocks[1].Type != attest.BlockProvider:
		// Not attestation evidence: most likely two requests pasted
		// together, which is what the message must say.
		return nil, fmt.Errorf("must hold one PEM block of type %q, found %d blocks (%s): only a TPM-attested request has more, its %s and %s blocks",
			CertificateRequestPEMType, len(blocks), blockTypes(blocks), attest.BlockProvider, attest.BlockData)
	case len(blocks) > 1:
		// The evidence's reading parses the request too.
		req, err := attest.ParseRequest(data)
		if err != nil {
			return nil, fmt.Errorf("attestation evidence: %w", err)
		}
		csr = req.CSR
	default:
		if csr, err = x509.ParseCertificateRequest(blocks[0].Bytes); err != nil {
			return nil, fmt.Errorf("not a valid PKCS#10 certificate request: %v", err)
		}
	}
	if verify {
		if err := csr.CheckSignature(); err != nil {
			return nil, fmt.Errorf("the certificate request's signature does not verify: %v", err)
		}
	}
	return csr, nil
}

// ParseStoredCSR decodes spec.request of a stored object: the same checks as
// ParseCSR except the signature, which was verified when the object was
// created (spec is immutable). The signer, the approver and admission after
// validation use it, so that a request's signature is verified once.
//
// One create or approval reads the same request in admission, in the
// approval decision and in the signature: a small cache keyed by content
// parses it once. The result is shared: callers must not modify it.
func ParseStoredCSR(data []byte) (*x509.CertificateRequest, error) {
	if len(data) > maxCachedCSRBytes {
		return parseCSR(data, false)
	}
	if e := storedSlot(data).Load(); e != nil && bytes.Equal(e.raw, data) {
		return e.csr, nil
	}
	csr, err := parseCSR(data, false)
	if err != nil {
		return nil, err
	}
	keepParsed(data, csr)
	return csr, nil
}

func storedSlot(data []byte) *atomic.Pointer[parsedCSR] {
	return &storedCSRs[maphash.Bytes(storedCSRSeed, data)%uint64(len(storedCSRs))]
}

// keepParsed caches what data parses to, for ParseStoredCSR.
func keepParsed(data []byte, csr *x509.CertificateRequest) {
	if len(data) <= maxCachedCSRBytes {
		storedSlot(data).Store(&parsedCSR{raw: bytes.Clone(data), csr: csr})
	}
}

// parsedCSR is a cache entry: the exact bytes, and what they parse to.
type parsedCSR struct {
	raw []byte
	csr *x509.CertificateRequest
}

// storedCSRs holds recently parsed requests, one per slot; a collision
// replaces the entry. Requests larger than maxCachedCSRBytes (those with
// TPM evidence, mostly) are not kept: 256 slots hold at most 1 MiB.
const maxCachedCSRBytes = 4 << 10

var (
	storedCSRs    [256]atomic.Pointer[parsedCSR]
	storedCSRSeed = maphash.MakeSeed()
)

// ParseCertificateChain decodes status.certificate into its certificates,
// in order. Only whitespace may surround and separate the blocks: unlike
// certificates.k8s.io, explanatory text is refused, so that every client
// reads the same chain.
func ParseCertificateChain(data []byte) ([]*x509.Certificate, error) {
	if len(data) > MaxCertificateBytes {
		return nil, errCertificateTooLarge
	}
	return strictpem.Certificates(data, MaxCertificateBlocks)
}

// blockTypes lists the PEM types of blocks for a message.
func blockTypes(blocks []*pem.Block) string {
	types := make([]string, len(blocks))
	for i, b := range blocks {
		types[i] = b.Type
	}
	return strings.Join(types, ", ")
}
