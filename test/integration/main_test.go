package integration

import (
	"os"
	"testing"

	"rekey.io/rekey/test/framework"
)

// TestMain removes the binaries the tests built once they are done.
func TestMain(m *testing.M) {
	code := m.Run()
	framework.RemoveBinaries()
	os.Exit(code)
}
