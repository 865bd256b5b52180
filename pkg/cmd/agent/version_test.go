package agent

import (
	"bytes"
	"testing"

	"rekey.io/rekey/pkg/version"
)

func TestVersionFlag(t *testing.T) {
	var out bytes.Buffer
	cmd := NewCommand(&out)
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := "rekey-agent " + version.Get().String() + "\n"; out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
}
