// Package attesttest stands in for a node's TPM in unit tests and
// benchmarks of the server side: an AK and an EK in software, and evidence
// made as a TPM would make it. The credential-activation step is skipped
// by giving the stored challenge a secret the test knows (KnownSecret).
package attesttest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"strconv"
	"testing"

	"github.com/google/go-tpm/tpm2"

	"rekey.io/rekey/pkg/attest"
)

// Node is a software TPM's keys.
type Node struct {
	AK            *ecdsa.PrivateKey
	AKPublic      []byte
	EKPublic      []byte
	EKFingerprint string
}

// NewNode makes an AK (rekey-agent's template) and an RSA EK.
func NewNode(t testing.TB) *Node {
	t.Helper()
	ak, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	akPub := attest.AKTemplate()
	akPub.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{
		X: tpm2.TPM2BECCParameter{Buffer: ak.X.FillBytes(make([]byte, 32))},
		Y: tpm2.TPM2BECCParameter{Buffer: ak.Y.FillBytes(make([]byte, 32))},
	})
	ek, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ekPub := tpm2.RSAEKTemplate
	ekPub.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: ek.N.Bytes()})
	fp, err := attest.Fingerprint(&ek.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return &Node{AK: ak, AKPublic: tpm2.Marshal(&akPub), EKPublic: tpm2.Marshal(&ekPub), EKFingerprint: fp}
}

// PCR is a PCR value filled with b.
func PCR(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// KnownSecret replaces the secret of node's outstanding challenge with one
// the test knows, standing in for the TPM's ActivateCredential.
func KnownSecret(t testing.TB, store attest.Store, node string) []byte {
	t.Helper()
	ctx := context.Background()
	c, err := store.GetChallenge(ctx, node)
	if err != nil || c == nil {
		t.Fatalf("no challenge for %s: %v", node, err)
	}
	secret := make([]byte, attest.SecretSize)
	_, _ = rand.Read(secret)
	c.SecretHash = attest.SecretHash(secret)
	if err := store.PutChallenge(ctx, node, *c); err != nil {
		t.Fatal(err)
	}
	return secret
}

// CSR is a request for cn with a fresh key, as DER.
func CSR(t testing.TB, cn string, mutate func(*x509.CertificateRequest)) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}}}
	if mutate != nil {
		mutate(tmpl)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

// Request is spec.request for a CSR (DER) of key with the evidence a TPM
// holding n's AK makes for secret and these PCR values.
func (n *Node) Request(t testing.TB, csrDER []byte, key *ecdsa.PrivateKey, secret []byte, pcrs map[int][]byte) []byte {
	t.Helper()
	spki, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sel, err := attest.Selection(tpm2.TPMAlgSHA256, pcrs)
	if err != nil {
		t.Fatal(err)
	}
	q := tpm2.Marshal(&tpm2.TPMSAttest{
		Magic: tpm2.TPMGeneratedValue, Type: tpm2.TPMSTAttestQuote,
		ExtraData: tpm2.TPM2BData{Buffer: attest.QualifyingData(secret, spki)},
		Attested:  tpm2.NewTPMUAttest(tpm2.TPMSTAttestQuote, &tpm2.TPMSQuoteInfo{PCRSelect: sel, PCRDigest: tpm2.TPM2BDigest{Buffer: attest.PCRDigest(pcrs)}}),
	})
	d := sha256.Sum256(q)
	r, s, err := ecdsa.Sign(rand.Reader, n.AK, d[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := tpm2.Marshal(&tpm2.TPMTSignature{SigAlg: tpm2.TPMAlgECDSA, Signature: tpm2.NewTPMUSignature(tpm2.TPMAlgECDSA, &tpm2.TPMSSignatureECC{
		Hash: tpm2.TPMAlgSHA256, SignatureR: tpm2.TPM2BECCParameter{Buffer: r.Bytes()}, SignatureS: tpm2.TPM2BECCParameter{Buffer: s.Bytes()},
	})})
	values := map[string][]byte{}
	for i, v := range pcrs {
		values[strconv.Itoa(i)] = v
	}
	out, err := attest.EncodeRequest(csrDER, &attest.EvidenceV1{Version: attest.EvidenceVersionV1, Secret: secret, Quote: q, Signature: sig, PCRBank: "sha256", PCRs: values})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
