package credential

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"math/big"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
)

// Minter makes and revokes one kind of credential. Mint must be safe to
// repeat for a generation whose mint was not recorded (the process died
// between minting and writing the Secret): it either makes the same
// credential again or one whose revocation covers every credential made
// for that generation. Revoke must tolerate a generation already revoked
// or never minted. Neither may put a credential value in an error.
type Minter interface {
	Mint(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, generation int64) (map[string][]byte, error)
	Revoke(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, generation int64) error
}

// OldValuesRevoker is a Minter that revokes a generation by its values,
// which the Secret keeps under the ".old" keys during the grace period:
// the ClientCertificate minter revokes the old certificate by its SHA-256.
// old is nil when the Secret no longer holds them.
type OldValuesRevoker interface {
	RevokeWithOld(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, generation int64, old map[string][]byte) error
}

// MintError is a failed mint or revocation with a reason for the
// Degraded condition and the metrics.
type MintError struct {
	Reason string
	Err    error
}

func (e *MintError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *MintError) Unwrap() error { return e.Err }

// RandomMinter makes random tokens; there is nothing to revoke, and a
// repeated mint simply makes another token (none left the process).
type RandomMinter struct{}

// Mint implements Minter.
func (RandomMinter) Mint(_ context.Context, rc *rotationv1alpha1.RotatingCredential, _ int64) (map[string][]byte, error) {
	r := rc.Spec.Minter.Random
	if r == nil {
		return nil, &MintError{Reason: "InvalidSpec", Err: fmt.Errorf("no random block")}
	}
	// Validation refuses such a key; an object stored before it did is
	// refused here, as a webhook's key is.
	if msg := validKey(r.Key); msg != "" {
		return nil, &MintError{Reason: "InvalidSpec", Err: fmt.Errorf("spec.minter.random.key %q: %s", r.Key, msg)}
	}
	value, err := randomValue(int(r.Length), r.Alphabet)
	if err != nil {
		return nil, &MintError{Reason: "RandomFailed", Err: err}
	}
	return map[string][]byte{r.Key: value}, nil
}

// Revoke implements Minter: a random token is valid wherever its Secret is
// read, so removing it from the Secret is its revocation.
func (RandomMinter) Revoke(context.Context, *rotationv1alpha1.RotatingCredential, int64) error {
	return nil
}

func randomValue(length int, alphabet string) ([]byte, error) {
	if alphabet == "" {
		b := make([]byte, length)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		return []byte(base64.RawURLEncoding.EncodeToString(b)), nil
	}
	out := make([]byte, length)
	n := big.NewInt(int64(len(alphabet)))
	for i := range out {
		// rand.Int is uniform: no modulo bias.
		j, err := rand.Int(rand.Reader, n)
		if err != nil {
			return nil, err
		}
		out[i] = alphabet[j.Int64()]
	}
	return out, nil
}
