// Command kubectl-rekey is a kubectl plugin: put it on PATH and run
// `kubectl rekey approve|deny NAME`, `kubectl rekey rotate
// start|prepare --force|complete NAME`, `kubectl rekey status NAME`,
// `kubectl rekey consumers [CA]`, `kubectl rekey bundle NAME` or
// `kubectl rekey revoke NAME|--host-csr|--pcr|--serial|--sha256`.
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
