// Command pause is the sandbox ("pause") container of the end-to-end tests'
// node, which has no registry to pull one from: it holds the pod's
// namespaces and waits for a signal.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
}
