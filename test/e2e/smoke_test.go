package e2e

import (
	"strings"
	"testing"

	"rekey.io/rekey/test/framework"
)

func TestAPIResourcesListTheGroup(t *testing.T) {
	out, errOut, err := framework.RunKubectl(t, cluster.AdminKubeconfig, nil, "api-resources", "--api-group=certificates.rekey.io")
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	if !strings.Contains(out, "certificatesigningrequests") || !strings.Contains(out, "rcsr") {
		t.Fatalf("api-resources:\n%s", out)
	}
}
