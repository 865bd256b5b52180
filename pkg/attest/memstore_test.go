package attest_test

import (
	"testing"

	"rekey.io/rekey/pkg/attest"
	"rekey.io/rekey/pkg/attest/storetest"
)

func TestMemoryStore(t *testing.T) {
	storetest.Run(t, func(*testing.T) attest.Store { return attest.NewMemoryStore() })
}
