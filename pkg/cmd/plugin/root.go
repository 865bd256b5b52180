// Package plugin implements kubectl-rekey, the kubectl plugin for rekey.
package plugin

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

// NewCommand returns `kubectl rekey` with kubectl's usual connection flags.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	configFlags := genericclioptions.NewConfigFlags(true)
	// Server warnings go to stderr as kubectl prints them ("Warning:
	// ..."), not as client-go's default klog lines. A dry run's client
	// replaces this handler: it reads the decision from the warnings.
	warnings := rest.NewWarningWriter(streams.ErrOut, rest.WarningWriterOptions{Deduplicate: true})
	configFlags.WrapConfigFn = func(cfg *rest.Config) *rest.Config {
		cfg.WarningHandler = warnings
		return cfg
	}
	cmd := &cobra.Command{
		// The binary is kubectl-rekey; help and errors name it as users
		// type it, "kubectl rekey".
		Use:         "kubectl-rekey",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl rekey"},
		Short:       "Work with rekey certificate requests, signers and authorities",
		Long: `Work with rekey certificate requests, signers and authorities.

kubectl runs this plugin as "kubectl rekey" when kubectl-rekey is on PATH.
Shell completion of its commands and of the names of requests,
CertificateAuthorities and Signers works through kubectl (1.26 and later)
when kubectl_complete-rekey (built beside kubectl-rekey) is on PATH too.`,
		SilenceUsage: true,
		// `kubectl-rekey completion SHELL` completes the binary, not
		// "kubectl rekey": kept for those who run it directly, but not
		// listed beside the commands (kubectl_complete-rekey is the way).
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: true},
		// Errors are printed once by main, not by cobra as well.
		SilenceErrors: true,
	}
	configFlags.AddFlags(cmd.PersistentFlags())
	newClient := func() (clientset.Interface, error) {
		cfg, err := configFlags.ToRESTConfig()
		if err != nil {
			return nil, err
		}
		return clientset.NewForConfig(cfg)
	}
	cmd.AddCommand(newDecisionCommand(decisionApprove, newClient, streams))
	cmd.AddCommand(newDecisionCommand(decisionDeny, newClient, streams))
	namespace := func() (string, error) {
		ns, _, err := configFlags.ToRawKubeConfigLoader().Namespace()
		return ns, err
	}
	newKube := func() (kubernetes.Interface, error) {
		cfg, err := configFlags.ToRESTConfig()
		if err != nil {
			return nil, err
		}
		return kubernetes.NewForConfig(cfg)
	}
	cmd.AddCommand(newRotateCommand(newClient, namespace, streams))
	cmd.AddCommand(newStatusCommand(newClient, newKube, namespace, streams))
	cmd.AddCommand(newBundleCommand(newClient, streams))
	cmd.AddCommand(newConsumersCommand(newClient, streams))
	cmd.AddCommand(newAttestCommand(newClient, streams))
	cmd.AddCommand(newRevokeCommand(newClient, newKube, namespace, streams))
	cmd.AddCommand(newVersionCommand(configFlags.ToRESTConfig, streams))
	cmd.AddCommand(newRequestCommand(newRequestDeps(configFlags, newClient), streams))
	cmd.AddCommand(newInspectCommand(newClient, newKube, streams))
	cmd.AddCommand(newRenewCommand(newRequestDeps(configFlags, newClient), streams))
	// Last: completion for every command above.
	addCompletions(cmd, Completer{newClient: newClient, namespace: namespace})
	return cmd
}
