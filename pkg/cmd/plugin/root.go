// Package plugin implements kubectl-rekey, the kubectl plugin for rekey.
package plugin

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

// NewCommand returns `kubectl rekey` with kubectl's usual connection flags.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	configFlags := genericclioptions.NewConfigFlags(true)
	cmd := &cobra.Command{
		Use:          "kubectl rekey",
		Short:        "Work with rekey certificate requests, signers and authorities",
		SilenceUsage: true,
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
	return cmd
}
