package attest

import (
	"bytes"
	"fmt"

	"github.com/google/go-tpm/tpm2"
)

// unmarshalExact parses a TPM structure the node sent and refuses trailing
// or non-canonical bytes, so that what is hashed or signed (an AK's name,
// a quote) covers exactly what was checked. what names the structure in
// errors ("the AK public area").
func unmarshalExact[T tpm2.Marshallable, P interface {
	*T
	tpm2.Unmarshallable
}](what string, data []byte) (*T, error) {
	v, err := tpm2.Unmarshal[T, P](data)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", what, err)
	}
	if !bytes.Equal(tpm2.Marshal(P(v)), data) {
		return nil, fmt.Errorf("%s has trailing or non-canonical bytes", what)
	}
	return v, nil
}
