// Command rekey-apiserver serves rekey's API groups.
package main

import (
	"os"
	"runtime/debug"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"rekey.io/rekey/pkg/cmd/server"
)

func main() {
	// An API server allocates mostly short-lived objects (decoded requests,
	// watch events); collecting half as often trades a little memory for
	// markedly less GC CPU. GOGC in the environment still wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}
	ctx := genericapiserver.SetupSignalContext()
	cmd := server.NewCommand(ctx, os.Stdout, os.Stderr)
	os.Exit(cli.Run(cmd))
}
