package server

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"rekey.io/rekey/pkg/version"
)

func TestVersionFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	cmd := NewCommand(context.Background(), &out, &errOut)
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := "rekey-apiserver " + version.Get().String() + "\n"; out.String() != want || !strings.HasPrefix(out.String(), "rekey-apiserver v"+version.Base) {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
}
