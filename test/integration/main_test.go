package integration

import (
	"fmt"
	"os"
	"testing"

	"rekey.io/rekey/test/framework"
)

// TestMain stops the control plane the tests shared, if one started it,
// and removes the binaries the tests built once they are done.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := stopKubeCluster(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	framework.RemoveBinaries()
	os.Exit(code)
}
