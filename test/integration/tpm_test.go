package integration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"

	"rekey.io/rekey/pkg/agent/tpmnode"
	"rekey.io/rekey/pkg/attest"
	"rekey.io/rekey/test/framework"
)

// The TPM tests are not parallel: each manufactures an emulated TPM with
// swtpm_setup, whose EK certificates the host's one swtpm local CA signs,
// and StartSWTPM does not choose again when the ports it picked are taken;
// they take about a second each.

// TestTPMAttestationFlow runs both sides of the attestation against the
// swtpm emulator: the node's EK certificate chains to the swtpm local CA
// and names the EK the TPM derives, the AK passes the server's checks, the
// TPM recovers the secret of a challenge made in pure Go, and its quote
// over the policy's PCRs with qualifying data bound to the secret and a CSR
// key verifies; the same quote is refused for another CSR key, and a
// challenge made for another AK cannot be activated.
func TestTPMAttestationFlow(t *testing.T) {
	dev := framework.OpenSWTPM(t)

	// The EK certificate and the EK.
	certDER, err := dev.EKCertificate()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := attest.ParseEKCertificate(certDER)
	if err != nil {
		t.Fatal(err)
	}
	roots, intermediates := framework.SWTPMCertPools(t)
	if err := attest.VerifyEKCertificate(cert, roots, intermediates, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := attest.VerifyEKCertificate(cert, x509.NewCertPool(), nil, time.Now()); err == nil {
		t.Fatal("an EK certificate verified against an empty root set")
	}
	ek, err := dev.EK()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { dev.Flush(ek.Handle) }()
	ekPub, ekKey, err := attest.ParseEKPublic(ek.Public)
	if err != nil {
		t.Fatal(err)
	}
	certFP, _ := attest.Fingerprint(cert.PublicKey)
	keyFP, _ := attest.Fingerprint(ekKey)
	if certFP != keyFP {
		t.Fatal("the EK certificate does not name the TPM's EK")
	}

	// The AK and the challenge.
	ak, err := dev.CreateAK()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Flush(ak.Handle)
	checked, err := attest.ParseAK(ak.Public)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(checked.Name, ak.Name.Buffer) {
		t.Fatal("the server's AK name differs from the TPM's")
	}
	challenge, err := attest.MakeChallenge(ekPub, checked.Name)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := dev.ActivateCredential(ak, ek, challenge.CredentialBlob, challenge.EncryptedSecret)
	if err != nil {
		t.Fatal(err)
	}
	if !attest.SecretMatches(secret, attest.SecretHash(challenge.Secret)) {
		t.Fatal("the TPM recovered another secret")
	}

	// A quote bound to the secret and the CSR key.
	csrKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	spki, _ := x509.MarshalPKIXPublicKey(&csrKey.PublicKey)
	pcrs := []int{0, 7}
	quote, sig, values, err := dev.Quote(ak, attest.QualifyingData(secret, spki), pcrs)
	if err != nil {
		t.Fatal(err)
	}
	want := attest.QuoteExpectations{QualifyingData: attest.QualifyingData(challenge.Secret, spki), Bank: tpm2.TPMAlgSHA256, PCRs: values}
	if err := attest.VerifyQuote(checked, quote, sig, want); err != nil {
		t.Fatalf("the TPM's quote refused: %v", err)
	}
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherSPKI, _ := x509.MarshalPKIXPublicKey(&otherKey.PublicKey)
	copied := want
	copied.QualifyingData = attest.QualifyingData(challenge.Secret, otherSPKI)
	if err := attest.VerifyQuote(checked, quote, sig, copied); err == nil || !strings.Contains(err.Error(), "qualifying data") {
		t.Fatalf("evidence copied to another CSR key: %v", err)
	}
	changed := want
	changed.PCRs = map[int][]byte{0: values[0], 7: bytes.Repeat([]byte{1}, 32)}
	if err := attest.VerifyQuote(checked, quote, sig, changed); err == nil {
		t.Fatal("a quote verified against other PCR values")
	}

	// A challenge for another AK: the TPM refuses to release it. (swtpm
	// holds three objects: the EK makes room for the other AK's parent.)
	dev.Flush(ek.Handle)
	other, err := dev.CreateAK()
	if err != nil {
		t.Fatal(err)
	}
	otherName := append([]byte(nil), other.Name.Buffer...)
	dev.Flush(other.Handle)
	if ek, err = dev.EK(); err != nil {
		t.Fatal(err)
	}
	foreign, err := attest.MakeChallenge(ekPub, otherName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dev.ActivateCredential(ak, ek, foreign.CredentialBlob, foreign.EncryptedSecret); err == nil || !errors.Is(err, tpm2.TPMRCIntegrity) {
		t.Fatalf("a challenge made for another AK: %v", err)
	}
}

// TestTPMAttestationThroughVerifier: the server's Verifier (policy with
// the swtpm local CA as EK root, fixed to the TPM's current PCR 0 and 7)
// challenges, and a CSR carrying the swtpm's evidence in its PEM blocks is
// attested and binds the EK to the node; its replay is refused.
func TestTPMAttestationThroughVerifier(t *testing.T) {
	ctx := context.Background()
	dev := framework.OpenSWTPM(t)
	certDER, err := dev.EKCertificate()
	if err != nil {
		t.Fatal(err)
	}
	ek, err := dev.EK()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { dev.Flush(ek.Handle) }()
	ak, err := dev.CreateAK()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Flush(ak.Handle)
	// The policy's fixed values: what this (fresh) TPM holds.
	_, _, current, err := dev.Quote(ak, nil, []int{0, 7})
	if err != nil {
		t.Fatal(err)
	}
	roots, intermediates := framework.SWTPMCertPools(t)
	store := attest.NewMemoryStore()
	v := &attest.Verifier{Store: store, Now: time.Now, Policy: attest.Policy{
		Name: "swtpm", Roots: roots, Intermediates: intermediates, PCRs: current,
		ChallengeLifetime: 5 * time.Minute, MaxAttemptsPerHour: 10,
	}}

	challenge, fp, err := v.Challenge(ctx, attest.ChallengeRequest{Node: "tpm-node", EKCertificate: certDER, EKPublic: ek.Public, AKPublic: ak.Public})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := dev.ActivateCredential(ak, ek, challenge.CredentialBlob, challenge.EncryptedSecret)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	spki, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	quote, sig, values, err := dev.Quote(ak, attest.QualifyingData(secret, spki), []int{0, 7})
	if err != nil {
		t.Fatal(err)
	}
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:tpm-node", Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	ev := &attest.EvidenceV1{Version: attest.EvidenceVersionV1, Secret: secret, Quote: quote, Signature: sig, PCRBank: "sha256", PCRs: map[string][]byte{}}
	for i, val := range values {
		ev.PCRs[strconv.Itoa(i)] = val
	}
	data, err := attest.EncodeRequest(csrDER, ev)
	if err != nil {
		t.Fatal(err)
	}
	req, err := attest.ParseRequest(data)
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.VerifyRequest(ctx, "tpm-node", attest.ClientRequest, req)
	if err != nil {
		t.Fatalf("the swtpm's evidence refused: %v", err)
	}
	if got.EKFingerprint != fp || !got.FirstUse {
		t.Fatalf("attested %+v", got)
	}
	if b, _ := store.BindingForEK(ctx, fp); b == nil || b.Node != "tpm-node" {
		t.Fatalf("EK not bound: %+v", b)
	}
	if _, err := v.VerifyRequest(ctx, "tpm-node", attest.ClientRequest, req); err == nil || !strings.Contains(err.Error(), "NoChallenge") {
		t.Fatalf("replayed request: %v", err)
	}
	// Another node presenting this TPM's EK is refused at the challenge.
	if _, _, err := v.Challenge(ctx, attest.ChallengeRequest{Node: "impostor", EKCertificate: certDER, EKPublic: ek.Public, AKPublic: ak.Public}); err == nil || !strings.Contains(err.Error(), "EKBoundToAnotherNode") {
		t.Fatalf("the EK for another node: %v", err)
	}
}

// TestTPMAKIsKept: the agent's AK survives a restart (same name, so the
// server's record of it still holds), a lost public file makes a new one,
// and a corrupted blob is an error naming the files.
func TestTPMAKIsKept(t *testing.T) {
	dev := framework.OpenSWTPM(t)
	dir := t.TempDir()
	first, err := dev.LoadOrCreateAK(dir)
	if err != nil {
		t.Fatal(err)
	}
	dev.Flush(first.Handle)
	for _, f := range []string{tpmnode.AKPublicFile, tpmnode.AKPrivateFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, st, err)
		}
	}
	again, err := dev.LoadOrCreateAK(dir)
	if err != nil {
		t.Fatal(err)
	}
	dev.Flush(again.Handle)
	if !bytes.Equal(first.Name.Buffer, again.Name.Buffer) {
		t.Fatal("the kept AK was not reused")
	}
	if _, err := attest.ParseAK(again.Public); err != nil {
		t.Fatalf("the reloaded AK: %v", err)
	}

	if err := os.Remove(filepath.Join(dir, tpmnode.AKPublicFile)); err != nil {
		t.Fatal(err)
	}
	fresh, err := dev.LoadOrCreateAK(dir)
	if err != nil {
		t.Fatal(err)
	}
	dev.Flush(fresh.Handle)
	if bytes.Equal(fresh.Name.Buffer, first.Name.Buffer) {
		t.Fatal("no new AK after the public file was lost")
	}

	if err := os.WriteFile(filepath.Join(dir, tpmnode.AKPrivateFile), []byte{0, 4, 1, 2, 3, 4}, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := dev.LoadOrCreateAK(dir); err == nil || !strings.Contains(err.Error(), tpmnode.AKPrivateFile) {
		t.Fatalf("a corrupted AK blob: %v", err)
	}
}
