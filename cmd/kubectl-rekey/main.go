// Command kubectl-rekey is a kubectl plugin: put it on PATH and run
// `kubectl rekey COMMAND` (approve, deny, rotate, status, revoke, ...;
// `kubectl rekey --help` lists them). kubectl_complete-rekey, in this
// directory and installed beside the binary by make build, lets kubectl
// (1.26 and later) complete its commands and the names of objects.
package main

import (
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"rekey.io/rekey/pkg/cmd/plugin"
)

func main() {
	cmd := plugin.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.Execute(); err != nil {
		if !plugin.IsReported(err) {
			fmt.Fprintf(os.Stderr, "error: %v\n", err)
		}
		os.Exit(1)
	}
}
