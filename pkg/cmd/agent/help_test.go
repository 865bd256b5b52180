package agent

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestFlagHelpIsNotGarbled: pflag takes a `quoted` word in a flag's usage
// as the name of its value, so "--recheck `run`" printed as
// "--recheck run" with the word gone from the sentence. No usage quotes
// one, and exec-credential's help reads as written.
func TestFlagHelpIsNotGarbled(t *testing.T) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: usage %q quotes a word with backquotes", c.CommandPath(), f.Name, f.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewCommand(&bytes.Buffer{}))

	var out bytes.Buffer
	root := NewCommand(&out)
	root.SetOut(&out)
	root.SetArgs([]string{"exec-credential", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--recheck duration", "--renew-before duration", "a certificate rekey-agent run renewed early", "the --renew-before of rekey-agent run"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
}
