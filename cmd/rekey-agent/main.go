// Command rekey-agent runs on a node: it bootstraps and renews the node's
// client certificate through certificates.rekey.io, and can hand it to the
// kubelet as a client-go exec credential plugin.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"rekey.io/rekey/pkg/cmd/agent"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := agent.NewCommand(os.Stdout).ExecuteContext(ctx); err != nil {
		os.Exit(1)
	}
}
