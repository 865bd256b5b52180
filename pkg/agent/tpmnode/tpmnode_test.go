package tpmnode

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// Open names the TPM it could not reach, for both kinds of address. (The
// commands themselves run against swtpm in test/integration.)
func TestOpenNamesTheTPM(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "tcp://" + l.Addr().String()
	_ = l.Close() // nothing listens there now
	missing := filepath.Join(t.TempDir(), "tpmrm0")
	for _, a := range []string{addr, missing} {
		if _, err := Open(a); err == nil || !strings.Contains(err.Error(), a) {
			t.Errorf("Open(%q): %v, want an error naming it", a, err)
		}
	}
}

// Quote refuses an empty PCR list before it sends anything to the TPM.
func TestQuoteNeedsPCRs(t *testing.T) {
	if _, _, _, err := (&Device{}).Quote(&Key{}, nil, nil); err == nil || !strings.Contains(err.Error(), "no PCRs") {
		t.Fatalf("error %v", err)
	}
}
