// Command rekey-apiserver serves rekey's API groups.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"rekey.io/rekey/pkg/cmd/server"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	cmd := server.NewCommand(ctx, os.Stdout, os.Stderr)
	os.Exit(cli.Run(cmd))
}
