package plugin

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func runRoot(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&out)
	err := root.Execute()
	return out.String(), err
}

// TestHelpSaysKubectlRekey: every command's usage line, path and help
// name the plugin as users type it.
func TestHelpSaysKubectlRekey(t *testing.T) {
	root := NewCommand(genericiooptions.IOStreams{})
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if !strings.HasPrefix(c.CommandPath(), "kubectl rekey") || !strings.HasPrefix(c.UseLine(), "kubectl rekey") {
			t.Errorf("command %q: path %q, usage %q", c.Name(), c.CommandPath(), c.UseLine())
		}
		for _, line := range strings.Split(c.Example, "\n") {
			if l := strings.TrimSpace(line); strings.HasPrefix(l, "kubectl ") && !strings.HasPrefix(l, "kubectl rekey ") && !strings.HasPrefix(l, "kubectl get ") {
				t.Errorf("command %q: example %q", c.CommandPath(), l)
			}
		}
		// pflag takes a `quoted` word of a usage as the value's name,
		// garbling the sentence (rekey-agent exec-credential had it).
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: usage %q backquotes a word", c.CommandPath(), f.Name, f.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"kubectl rekey [command]", "Approve rekey certificate signing requests (add an Approved condition)", `Use "kubectl rekey [command] --help"`, "kubectl_complete-rekey"}},
		{[]string{"approve", "--help"}, []string{"kubectl rekey approve (NAME... | -f FILENAME) [flags]", "kubectl rekey approve my-request", "--wait duration"}},
		{[]string{"deny", "--help"}, []string{"kubectl rekey deny (NAME... | -f FILENAME) [flags]", "--dry-run", "Add a Denied condition"}},
		{[]string{"help"}, []string{"Deny rekey certificate signing requests (add a Denied condition)"}},
		{[]string{"rotate", "start", "--help"}, []string{"kubectl rekey rotate start NAME | rcred/NAME [flags]", "rcred/NAME (or rotatingcredential/NAME) in\n-n NAMESPACE: mint a new credential now", "kubectl rekey rotate start rcred/db-password -n team-a"}},
		{[]string{"rotate", "complete", "--help"}, []string{"kubectl rekey rotate complete NAME | rcred/NAME [flags]", "end the grace period now"}},
	} {
		out, err := runRoot(t, tc.args...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		for _, want := range tc.want {
			if !strings.Contains(out, want) {
				t.Errorf("%v: no %q in\n%s", tc.args, want, out)
			}
		}
		if strings.Contains(out, "Usage:\n  kubectl [") || strings.Contains(out, "  kubectl approve") {
			t.Errorf("%v: help names kubectl alone:\n%s", tc.args, out)
		}
	}
}

// TestUnknownCommandNamesThePlugin: the error names "kubectl rekey",
// not "kubectl".
func TestUnknownCommandNamesThePlugin(t *testing.T) {
	_, err := runRoot(t, "bogus")
	if err == nil || err.Error() != `unknown command "bogus" for "kubectl rekey"` {
		t.Fatalf("error %v", err)
	}
	_, err = runRoot(t, "rotate", "strat", "x")
	if err == nil || err.Error() != "unknown command \"strat\" for \"kubectl rekey rotate\"\n\nDid you mean this?\n\tstart" {
		t.Fatalf("error %v", err)
	}
}

// TestCommandsComplete: NewCommand gives every command that takes the
// name of a rekey object a completion.
func TestCommandsComplete(t *testing.T) {
	root := NewCommand(genericiooptions.IOStreams{})
	for _, path := range []string{"approve", "deny", "revoke", "inspect", "renew", "rotate start", "rotate prepare", "rotate complete", "status", "bundle", "consumers", "attest status"} {
		cmd := subcommand(root, path)
		if cmd == nil || cmd.ValidArgsFunction == nil {
			t.Errorf("%q has no completion", path)
		}
	}
	for _, flag := range []struct{ path, name string }{{"revoke", "ca"}, {"request", "signer"}} {
		if _, ok := subcommand(root, flag.path).GetFlagCompletionFunc(flag.name); !ok {
			t.Errorf("%s --%s has no completion", flag.path, flag.name)
		}
	}
}

// TestServerWarningsPrintedLikeKubectl: a response's warning reaches
// stderr as kubectl prints it ("Warning: ..."), not as a klog line.
func TestServerWarningsPrintedLikeKubectl(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Add("Warning", `299 - "signer example.com/s is not Ready"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
	}))
	defer srv.Close()
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	var out, errOut bytes.Buffer
	root := NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	root.SetArgs([]string{"--server", srv.URL, "--insecure-skip-tls-verify", "approve", "web"})
	root.SetOut(&out)
	root.SetErr(&errOut)
	_ = root.Execute()
	if !strings.Contains(errOut.String(), "Warning: signer example.com/s is not Ready\n") {
		t.Fatalf("stderr lacks the warning:\n%s", errOut.String())
	}
}
