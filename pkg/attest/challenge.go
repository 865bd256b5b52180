package attest

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"

	"github.com/google/go-tpm/tpm2"
)

// SecretSize is the size of a credential-activation secret.
const SecretSize = 32

// Challenge is a credential-activation challenge: only the TPM that holds
// the EK, and holds the AK named in it, can recover Secret from
// (CredentialBlob, EncryptedSecret) with ActivateCredential.
type Challenge struct {
	CredentialBlob  []byte
	EncryptedSecret []byte
	// Secret is returned to the server once, to be stored hashed
	// (SecretHash) and never written anywhere readable.
	Secret []byte
}

// MakeChallenge is TPM2_MakeCredential in pure Go for an EK public area
// (from ParseEKPublic) and an AK name (from ParseAK).
func MakeChallenge(ek *tpm2.TPMTPublic, akName []byte) (*Challenge, error) {
	key, err := tpm2.ImportEncapsulationKey(ek)
	if err != nil {
		return nil, fmt.Errorf("EK as an encapsulation key: %w", err)
	}
	secret := make([]byte, SecretSize)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	blob, encSecret, err := tpm2.CreateCredential(rand.Reader, key, akName, secret)
	if err != nil {
		return nil, fmt.Errorf("making the credential: %w", err)
	}
	return &Challenge{CredentialBlob: blob, EncryptedSecret: encSecret, Secret: secret}, nil
}

// SecretHash is what the server keeps of a secret.
func SecretHash(secret []byte) []byte {
	sum := sha256.Sum256(secret)
	return sum[:]
}

// SecretMatches compares a presented secret with a stored hash in constant
// time.
func SecretMatches(secret, storedHash []byte) bool {
	return len(secret) == SecretSize && subtle.ConstantTimeCompare(SecretHash(secret), storedHash) == 1
}

// QualifyingData binds a quote to one challenge and one CSR key:
// SHA-256(secret ‖ DER SubjectPublicKeyInfo of the CSR's key).
func QualifyingData(secret, csrSPKI []byte) []byte {
	h := sha256.New()
	h.Write(secret)
	h.Write(csrSPKI)
	return h.Sum(nil)
}
