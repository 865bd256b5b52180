package server

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	"k8s.io/component-base/term"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/version"
)

// NewCommand returns the rekey-apiserver command.
func NewCommand(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	o := NewOptions(stdout, stderr)
	var printVersion bool
	cmd := &cobra.Command{
		Use:   "rekey-apiserver",
		Short: "rekey: the credential lifecycle of a Kubernetes cluster as an aggregated API server",
		Long: `rekey-apiserver serves certificates.rekey.io: certificate signing requests with
separate approval and signing.

Run it standalone for a local server with an embedded etcd:

  rekey-apiserver --standalone --data-dir .rekey

and give a user of it a kubeconfig with a client certificate from its PKI:

  rekey-apiserver standalone user-kubeconfig --user alice --group dev > alice.kubeconfig

or behind a kube-apiserver's aggregation layer with --etcd-servers and the
delegated authentication and authorization flags.`,
		SilenceUsage: true,
		RunE: func(c *cobra.Command, args []string) error {
			if printVersion {
				_, err := fmt.Fprintf(stdout, "rekey-apiserver %s\n", version.Get())
				return err
			}
			if len(args) > 0 {
				return fmt.Errorf("unexpected arguments %q", args)
			}
			// cli.Run's logs.InitLogs turned klog's contextual logging
			// off; with it off klog.FromContext ignores a context's
			// logger, and the calls that carry credentials rely on theirs
			// to never dump a body at any -v (package quietlog).
			klog.EnableContextualLogging(true)
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(c.Context())
		},
	}
	cmd.SetContext(ctx)

	fss := o.Flags()
	globalflag.AddGlobalFlags(fss.FlagSet("global"), cmd.Name())
	fss.FlagSet("global").BoolVar(&printVersion, "version", false, "Print the release (VERSION) and the git commit, and exit.")
	for _, f := range fss.FlagSets {
		cmd.Flags().AddFlagSet(f)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	cmd.AddCommand(newStandaloneCommand(stdout))
	return cmd
}
