package plugin

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

// Shell completion. Cobra answers `kubectl-rekey __complete ARGS...`;
// kubectl (1.26 and later) asks a plugin through an executable named
// kubectl_complete-rekey on PATH (cmd/kubectl-rekey ships it), which runs
// exactly that. The names come from the server, read with the
// connection flags already on the command line (--kubeconfig, --context,
// -n), each list bounded by completionTimeout so that a server that does
// not answer leaves the shell waiting a few seconds at most.

// completionTimeout bounds the server reads of one completion.
const completionTimeout = 5 * time.Second

// Completer completes the names of rekey objects from the server.
// Commands added to `kubectl rekey` later use its methods as their
// ValidArgsFunction or flag completion (cmd.RegisterFlagCompletionFunc).
type Completer struct {
	newClient func() (clientset.Interface, error)
	namespace func() (string, error)
}

// Requests completes the names of rekey CertificateSigningRequests, each
// with its state and signer name as the description. With pendingFirst,
// only pending requests are offered when some match (what approve and
// deny are for), all matching ones otherwise.
func (c Completer) Requests(pendingFirst bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		client, ctx, cancel, ok := c.client(cmd)
		if !ok {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer cancel()
		list, err := client.CertificatesV1alpha1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			return completionError(err)
		}
		var pending, all []cobra.Completion
		for i := range list.Items {
			csr := &list.Items[i]
			if !strings.HasPrefix(csr.Name, toComplete) || contains(args, csr.Name) {
				continue
			}
			comp := cobra.CompletionWithDesc(csr.Name, requestState(csr)+" "+csr.Spec.SignerName)
			all = append(all, comp)
			if certv1alpha1.IsPending(csr) {
				pending = append(pending, comp)
			}
		}
		if pendingFirst && len(pending) > 0 {
			all = pending
		}
		return sorted(all), cobra.ShellCompDirectiveNoFileComp
	}
}

// requestState is the state the table and the field selector call it.
func requestState(csr *certv1alpha1.CertificateSigningRequest) string {
	switch {
	case certv1alpha1.IsDenied(csr):
		return "Denied"
	case certv1alpha1.IsFailed(csr):
		return "Failed"
	case len(csr.Status.Certificate) > 0:
		return "Issued"
	case certv1alpha1.IsApproved(csr):
		return "Approved"
	}
	return "Pending"
}

// CertificateAuthorities completes CertificateAuthority names; with
// credentials, also rcred/NAME for the RotatingCredentials of the
// namespace (the rotation commands take both).
func (c Completer) CertificateAuthorities(credentials bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		client, ctx, cancel, ok := c.client(cmd)
		if !ok {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer cancel()
		var comps []cobra.Completion
		wantCredentials := credentials && (strings.HasPrefix("rcred/", toComplete) || strings.HasPrefix(toComplete, "rcred/"))
		if !strings.HasPrefix(toComplete, "rcred/") {
			list, err := client.RotationV1alpha1().CertificateAuthorities().List(ctx, metav1.ListOptions{})
			if err != nil && !wantCredentials {
				return completionError(err)
			}
			if err == nil {
				for i := range list.Items {
					ca := &list.Items[i]
					if strings.HasPrefix(ca.Name, toComplete) && !contains(args, ca.Name) {
						comps = append(comps, cobra.CompletionWithDesc(ca.Name, caDescription(ca)))
					}
				}
			}
		}
		if wantCredentials {
			if ns, err := c.namespace(); err == nil {
				// Offered only where the user may list them; a CA
				// rotator often may not, and needs no error for it.
				if list, err := client.RotationV1alpha1().RotatingCredentials(ns).List(ctx, metav1.ListOptions{}); err == nil {
					for i := range list.Items {
						name := "rcred/" + list.Items[i].Name
						if strings.HasPrefix(name, toComplete) && !contains(args, name) {
							comps = append(comps, cobra.CompletionWithDesc(name, "RotatingCredential in "+ns))
						}
					}
				}
			}
		}
		return sorted(comps), cobra.ShellCompDirectiveNoFileComp
	}
}

func caDescription(ca *rotationv1alpha1.CertificateAuthority) string {
	ready := "Ready unknown"
	if c := apimeta.FindStatusCondition(ca.Status.Conditions, rotationv1alpha1.CertificateAuthorityReady); c != nil {
		ready = "Ready=" + string(c.Status)
	}
	if ca.Status.Phase != "" {
		return fmt.Sprintf("%s, rotation %s", ready, ca.Status.Phase)
	}
	return ready
}

// SignerNames completes the signer names (spec.signerName, what
// requests name) of the Signers rekey serves.
func (c Completer) SignerNames() cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		client, ctx, cancel, ok := c.client(cmd)
		if !ok {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer cancel()
		list, err := client.CertificatesV1alpha1().Signers().List(ctx, metav1.ListOptions{})
		if err != nil {
			return completionError(err)
		}
		var comps []cobra.Completion
		for i := range list.Items {
			s := &list.Items[i]
			if strings.HasPrefix(s.Spec.SignerName, toComplete) {
				comps = append(comps, cobra.CompletionWithDesc(s.Spec.SignerName, "CA "+s.Spec.CertificateAuthorityRef.Name+", approval "+string(s.Spec.Approval.Mode)))
			}
		}
		return sorted(comps), cobra.ShellCompDirectiveNoFileComp
	}
}

// NodeAttestations completes the nodes that have a NodeAttestation.
func (c Completer) NodeAttestations() cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		client, ctx, cancel, ok := c.client(cmd)
		if !ok {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer cancel()
		list, err := client.AttestationV1alpha1().NodeAttestations().List(ctx, metav1.ListOptions{})
		if err != nil {
			return completionError(err)
		}
		var comps []cobra.Completion
		for i := range list.Items {
			if strings.HasPrefix(list.Items[i].Name, toComplete) {
				comps = append(comps, list.Items[i].Name)
			}
		}
		return sorted(comps), cobra.ShellCompDirectiveNoFileComp
	}
}

func (c Completer) client(cmd *cobra.Command) (clientset.Interface, context.Context, context.CancelFunc, bool) {
	client, err := c.newClient()
	if err != nil {
		cobra.CompErrorln(err.Error())
		return nil, nil, nil, false
	}
	ctx, cancel := context.WithTimeout(contextOf(cmd), completionTimeout)
	return client, ctx, cancel, true
}

// completionError reports a failed read where cobra shows its debug
// output (BASH_COMP_DEBUG_FILE), never as a completion.
func completionError(err error) ([]cobra.Completion, cobra.ShellCompDirective) {
	cobra.CompErrorln(statusMessage(err))
	return nil, cobra.ShellCompDirectiveNoFileComp
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sorted(comps []cobra.Completion) []cobra.Completion {
	sort.Strings(comps)
	return comps
}

// exactlyOne offers completions for the first argument only, for commands
// that take one name.
func exactlyOne(f cobra.CompletionFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return f(cmd, args, toComplete)
	}
}

// addCompletions gives the commands of root that take the names of rekey
// objects their completion, unless a command set its own. It runs after
// every command is added, so that it also reaches commands whose files do
// not know of it (a command missing from root is skipped).
func addCompletions(root *cobra.Command, c Completer) {
	args := map[string]cobra.CompletionFunc{
		"approve":         c.Requests(true),
		"deny":            c.Requests(true),
		"revoke":          c.Requests(false),
		"inspect":         exactlyOne(c.Requests(false)),
		"renew":           exactlyOne(c.Requests(false)),
		"rotate start":    exactlyOne(c.CertificateAuthorities(true)),
		"rotate prepare":  exactlyOne(c.CertificateAuthorities(false)),
		"rotate complete": exactlyOne(c.CertificateAuthorities(true)),
		"status":          exactlyOne(c.CertificateAuthorities(true)),
		"bundle":          exactlyOne(c.CertificateAuthorities(false)),
		"consumers":       c.CertificateAuthorities(false),
		"attest status":   c.NodeAttestations(),
	}
	for path, f := range args {
		if cmd := subcommand(root, path); cmd != nil && cmd.ValidArgsFunction == nil {
			cmd.ValidArgsFunction = f
		}
	}
	flags := []struct {
		path, flag string
		f          cobra.CompletionFunc
	}{
		{"revoke", "ca", c.CertificateAuthorities(false)},
		{"request", "signer", c.SignerNames()},
	}
	for _, fl := range flags {
		cmd := subcommand(root, fl.path)
		if cmd == nil || cmd.Flags().Lookup(fl.flag) == nil {
			continue
		}
		if _, set := cmd.GetFlagCompletionFunc(fl.flag); !set {
			_ = cmd.RegisterFlagCompletionFunc(fl.flag, fl.f)
		}
	}
}

// subcommand finds "rotate start" under root, or nil.
func subcommand(root *cobra.Command, path string) *cobra.Command {
	cmd := root
	for _, name := range strings.Fields(path) {
		var next *cobra.Command
		for _, sub := range cmd.Commands() {
			if sub.Name() == name {
				next = sub
				break
			}
		}
		if next == nil {
			return nil
		}
		cmd = next
	}
	return cmd
}
