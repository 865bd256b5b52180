package server

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/pkg/standalone"
)

// newStandaloneCommand is `rekey-apiserver standalone ...`: work on a
// standalone server's data directory.
func newStandaloneCommand(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "standalone",
		Short: "Work with a standalone server's data directory (--data-dir)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newUserKubeconfigCommand(stdout))
	// The root's help prints its flags by section; these commands have
	// cobra's own.
	cmd.SetUsageFunc((&cobra.Command{}).UsageFunc())
	cmd.SetHelpFunc((&cobra.Command{}).HelpFunc())
	return cmd
}

func newUserKubeconfigCommand(stdout io.Writer) *cobra.Command {
	var (
		dataDir, user, server, out string
		groups                     []string
	)
	cmd := &cobra.Command{
		Use:   "user-kubeconfig --user NAME [--group GROUP]... [--out FILE]",
		Short: "Print a kubeconfig for a user, with a client certificate from the standalone PKI",
		Long: `Issues a client certificate for --user in each --group with the standalone
client CA (--data-dir/pki/client-ca.key, valid for a year) and prints a
kubeconfig that uses it, for the server the admin kubeconfig names:

  rekey-apiserver standalone user-kubeconfig --user alice --group dev --out alice.kubeconfig
  kubectl --kubeconfig alice.kubeconfig auth whoami

The kubeconfig holds the user's private key: --out writes it with mode
0600, whatever the umask; redirecting standard output to a file would
leave the key readable by others (0644 under the usual umask).

Run it as the user that runs the server: it reads the CA's key. The server
need not be running, but must have started once (it writes the admin
kubeconfig).`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(c *cobra.Command, _ []string) error {
			data, err := standalone.UserKubeconfig(dataDir, server, user, groups)
			if err != nil {
				return err
			}
			if out != "" {
				if err := pki.WriteFileAtomic(out, data, 0o600); err != nil {
					return fmt.Errorf("writing --out %s: %w", out, err)
				}
				return nil
			}
			_, err = stdout.Write(data)
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dataDir, "data-dir", DefaultDataDir, "The standalone server's --data-dir.")
	fs.StringVar(&user, "user", "", "The user name (the certificate's common name).")
	fs.StringSliceVar(&groups, "group", nil, "A group of the user (the certificate's organizations); repeat for several.")
	fs.StringVar(&server, "server", "", "The server's URL (default: the admin kubeconfig's).")
	fs.StringVar(&out, "out", "", "Write the kubeconfig to this file (mode 0600) instead of standard output.")
	return cmd
}
