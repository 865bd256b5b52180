package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

// newRotateCommand is `kubectl rekey rotate start|prepare --force|complete [--force] NAME`.
func newRotateCommand(newClient func() (clientset.Interface, error), namespace func() (string, error), streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rotate (start|prepare --force|complete) NAME | rcred/NAME",
		Short: "Start, force or complete the two-phase rotation of a CertificateAuthority, or the rotation of a RotatingCredential",
		Long: `Start makes a new CA key and certificate and publishes it beside the old one
(phase Preparing): the old CA still signs. Once the new CA is in every bundle
rekey publishes, every TrustConsumer naming the CA holds it and
spec.rotation.trustPropagation has passed, the new CA signs (Prepared) and
holders renew. prepare --force ends that wait at once: the new CA signs
although consumers that do not trust it yet fail to verify what it signs.
Complete stops trusting the old CA and destroys its key (Completing, then
Completed); it is refused while certificates of the old CA are still valid
and not renewed, unless --force.

For a RotatingCredential (rcred/NAME, in -n NAMESPACE), Start mints a new
credential now (refused while a grace period runs) and Complete ends the grace
period now, revoking the previous credential at once (after a leak, say).

You need create on certificateauthorities/rotate or rotatingcredentials/rotate
(group rotation.rekey.io).`,
		Example: "  kubectl rekey rotate start team-ca\n  kubectl rekey status team-ca\n  kubectl rekey rotate complete team-ca\n  kubectl rekey rotate prepare --force team-ca   # end the wait for trust\n  kubectl rekey rotate start rcred/db-password -n team-a",
		// Runnable, so that a mistyped action is an error (cobra would
		// print the help and exit 0 for a group without a Run).
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return unknownSubcommand(cmd, args[0])
		},
	}
	for _, action := range []rotationv1alpha1.RotationAction{rotationv1alpha1.RotationStart, rotationv1alpha1.RotationPrepare, rotationv1alpha1.RotationComplete} {
		action := action
		var force bool
		verb := strings.ToLower(string(action))
		sub := &cobra.Command{
			Use:     verb + " NAME | rcred/NAME",
			Short:   fmt.Sprintf("%s the rotation of a CertificateAuthority (NAME) or of a RotatingCredential (rcred/NAME, in -n NAMESPACE)", action),
			Long:    rotateLong[action],
			Example: fmt.Sprintf("  kubectl rekey rotate %[1]s team-ca\n  kubectl rekey rotate %[1]s rcred/db-password -n team-a", verb),
			Args:    cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if action == rotationv1alpha1.RotationPrepare {
					// Checked here too, so that the user reads what force
					// does before anything is sent.
					if _, ok := credentialName(args[0]); ok {
						return fmt.Errorf("prepare applies to CertificateAuthorities only, not to %s", args[0])
					}
					if !force {
						return fmt.Errorf("prepare needs --force: %q becomes Prepared by itself once every trust consumer holds the new CA "+
							"(kubectl rekey status %s names those it waits for); --force ends the wait now, and the new CA then signs "+
							"although consumers that do not hold it yet fail to verify what it signs", args[0], caName(args[0]))
					}
				}
				client, err := newClient()
				if err != nil {
					return err
				}
				if name, ok := credentialName(args[0]); ok {
					ns, err := namespace()
					if err != nil {
						return err
					}
					rc, err := client.RotationV1alpha1().RotatingCredentials(ns).Rotate(contextOf(cmd), name,
						&rotationv1alpha1.Rotation{Action: action, Force: force}, metav1.CreateOptions{FieldManager: "kubectl-rekey"})
					if err != nil {
						return fmt.Errorf("cannot %s the rotation of rotatingcredential %s/%s: %s", strings.ToLower(string(action)), ns, name, statusMessage(err))
					}
					what := "a new credential is minted now"
					if action == rotationv1alpha1.RotationComplete {
						what = "the previous credential is revoked now"
					}
					fmt.Fprintf(streams.Out, "rotatingcredential.rotation.rekey.io/%s: %s\n", rc.Name, what)
					return nil
				}
				ca, err := client.RotationV1alpha1().CertificateAuthorities().Rotate(contextOf(cmd), caName(args[0]),
					&rotationv1alpha1.Rotation{Action: action, Force: force}, metav1.CreateOptions{FieldManager: "kubectl-rekey"})
				if err != nil {
					return fmt.Errorf("cannot %s the rotation of %q: %s", strings.ToLower(string(action)), args[0], statusMessage(err))
				}
				fmt.Fprintf(streams.Out, "certificateauthority.rotation.rekey.io/%s rotation %s (phase %s)\n", ca.Name, pastTense(action), ca.Status.Phase)
				return nil
			},
		}
		switch action {
		case rotationv1alpha1.RotationComplete:
			sub.Flags().BoolVar(&force, "force", false, "Complete although certificates of the previous CA are still valid and not renewed; they stop verifying.")
		case rotationv1alpha1.RotationPrepare:
			sub.Use = verb + " --force NAME"
			sub.Short = "End a Preparing rotation's wait for trust (needs --force): the new CA signs now"
			sub.Example = "  kubectl rekey rotate prepare --force team-ca"
			sub.Flags().BoolVar(&force, "force", false, "Required: end the wait for trust consumers and trustPropagation; consumers that do not hold the new CA yet fail to verify what it signs.")
		}
		cmd.AddCommand(sub)
	}
	return cmd
}

// unknownSubcommand is cobra's own error for an unknown command, with its
// suggestions.
func unknownSubcommand(cmd *cobra.Command, arg string) error {
	msg := fmt.Sprintf("unknown command %q for %q", arg, cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default for the root
	}
	if suggestions := cmd.SuggestionsFor(arg); len(suggestions) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(suggestions, "\n\t")
	}
	return errors.New(msg)
}

// rotateLong is each rotate subcommand's help: what it does to a
// CertificateAuthority and to a RotatingCredential (rcred/NAME).
var rotateLong = map[rotationv1alpha1.RotationAction]string{
	rotationv1alpha1.RotationStart: `For a CertificateAuthority NAME: make a new CA key and certificate and publish
it beside the old one (phase Preparing); the old CA still signs until the new
one is trusted everywhere (Prepared). kubectl rekey status NAME follows it.

For a RotatingCredential, rcred/NAME (or rotatingcredential/NAME) in
-n NAMESPACE: mint a new credential now; refused while a grace period runs.

You need create on certificateauthorities/rotate or rotatingcredentials/rotate
(group rotation.rekey.io).`,
	rotationv1alpha1.RotationPrepare: `End a Preparing rotation's wait for trust: the new CA signs now, although
trust consumers that do not hold it yet fail to verify what it signs. Needs
--force. CertificateAuthorities only.`,
	rotationv1alpha1.RotationComplete: `For a CertificateAuthority NAME: stop trusting the previous CA and destroy its
key (Completing, then Completed). Refused while certificates of the previous
CA are still valid and not renewed, unless --force.

For a RotatingCredential, rcred/NAME (or rotatingcredential/NAME) in
-n NAMESPACE: end the grace period now, revoking the previous credential at
once (after a leak, say).

You need create on certificateauthorities/rotate or rotatingcredentials/rotate
(group rotation.rekey.io).`,
}

// credentialName reads rcred/NAME (or rotatingcredential(s)/NAME).
func credentialName(arg string) (string, bool) {
	kind, name, ok := strings.Cut(arg, "/")
	switch kind {
	case "rcred", "rotatingcredential", "rotatingcredentials", "rotatingcredential.rotation.rekey.io":
		return name, ok && name != ""
	}
	return "", false
}

// caName reads NAME, rca/NAME or certificateauthority/NAME.
func caName(arg string) string {
	if kind, name, ok := strings.Cut(arg, "/"); ok {
		switch kind {
		case "rca", "certificateauthority", "certificateauthorities", "certificateauthority.rotation.rekey.io":
			return name
		}
	}
	return arg
}

func pastTense(a rotationv1alpha1.RotationAction) string {
	switch a {
	case rotationv1alpha1.RotationStart:
		return "started"
	case rotationv1alpha1.RotationPrepare:
		return "wait for trust overridden"
	}
	return "completing"
}

func contextOf(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// newStatusCommand is `kubectl rekey status NAME | rcred/NAME`.
func newStatusCommand(newClient func() (clientset.Interface, error), newKube func() (kubernetes.Interface, error), namespace func() (string, error), streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "status NAME | rcred/NAME",
		Short: "Show a CertificateAuthority's rotation (phase, times, old and new CA, how far the new CA is trusted and which trust consumers are waited for, who has not renewed) or a RotatingCredential's (mint time, next rotation, grace period, the Secret's keys)",
		Long: `For a CertificateAuthority: its phase and times, the current (signing),
previous and next CA, the trust section (the TrustPropagated condition, when
every bundle rekey writes first held the new CA, what rekey has not written
yet, how many TrustConsumers name the CA and how many do not hold the new
CA), a table of those TrustConsumers (those not holding the new CA first, at
most 50) and the certificates of the previous CA not renewed.

Listing the TrustConsumers needs list on trustconsumers (group
rotation.rekey.io); without it the table says so and the rest is shown.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if name, ok := credentialName(args[0]); ok {
				return credentialStatus(cmd, newClient, newKube, namespace, streams.Out, name)
			}
			ca, err := getCA(cmd, newClient, caName(args[0]))
			if err != nil {
				return err
			}
			var consumers consumersResult
			if client, err := newClient(); err != nil {
				consumers.err = err
			} else {
				consumers.items, consumers.err = listConsumers(contextOf(cmd), client, ca.Name)
			}
			printStatus(streams.Out, ca, consumers)
			return nil
		},
	}
}

// printStatus prints a CA's rotation; consumers are the TrustConsumers
// naming it (listed by the caller).
func printStatus(out io.Writer, ca *rotationv1alpha1.CertificateAuthority, consumers consumersResult) {
	s := ca.Status
	phase := string(s.Phase)
	if phase == "" {
		phase = "<never rotated>"
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "Name:\t%s\n", ca.Name)
	fmt.Fprintf(w, "Key store:\t%s (%s)\n", ca.Spec.KeyStore.Type, ca.Spec.KeyAlgorithm)
	fmt.Fprintf(w, "Phase:\t%s\n", phase)
	for _, t := range []struct {
		label string
		at    *metav1.Time
	}{{"Started:", s.LastInitiationTime}, {"Prepared:", s.LastInitiationFinishedTime}, {"Completion asked:", s.LastCompletionTriggeredTime}, {"Completed:", s.LastCompletionTime}} {
		if t.at != nil {
			fmt.Fprintf(w, "%s\t%s\n", t.label, t.at.UTC().Format(time.RFC3339))
		}
	}
	for _, c := range []struct {
		label string
		cert  *rotationv1alpha1.CACertificate
	}{{"Current CA:", s.Current}, {"Previous CA:", s.Previous}, {"Next CA:", s.Next}} {
		if c.cert != nil {
			fmt.Fprintf(w, "%s\t%s, valid %s to %s\n", c.label, c.cert.Fingerprint, c.cert.NotBefore.UTC().Format(time.RFC3339), c.cert.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	if s.Next != nil {
		// Preparing: say which one signs, the point of the phase.
		fmt.Fprintf(w, "Signs:\tthe current CA; the next CA signs once it is trusted (Prepared)\n")
	}
	printTrust(w, ca)
	fmt.Fprintf(w, "Not renewed:\t%d\n", s.PendingRenewal)
	_ = w.Flush()
	printConsumerTable(out, ca, consumers)
	if len(s.PendingRenewals) > 0 {
		fmt.Fprintln(out, "\nCertificates of the previous CA not renewed (first 20):")
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "REQUESTER\tSUBJECT\tCSR\tNOT AFTER")
		for _, p := range s.PendingRenewals {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Requester, p.Subject, p.CSRName, p.NotAfter.UTC().Format(time.RFC3339))
		}
		_ = tw.Flush()
	}
}

// newBundleCommand is `kubectl rekey bundle NAME`: the trust bundle on stdout.
func newBundleCommand(newClient func() (clientset.Interface, error), streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:     "bundle NAME",
		Short:   "Print the PEM trust bundle of a CertificateAuthority (old and new CA during a rotation); to keep a file current, use rekey-agent trust-sync",
		Example: "  kubectl rekey bundle rekey.io-kube-apiserver-client > client-ca.crt",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ca, err := getCA(cmd, newClient, args[0])
			if err != nil {
				return err
			}
			if ca.Status.TrustBundle == "" {
				return fmt.Errorf("CertificateAuthority %q has no trust bundle yet (its key is being made)", args[0])
			}
			_, err = io.WriteString(streams.Out, ca.Status.TrustBundle)
			return err
		},
	}
}

func getCA(cmd *cobra.Command, newClient func() (clientset.Interface, error), name string) (*rotationv1alpha1.CertificateAuthority, error) {
	client, err := newClient()
	if err != nil {
		return nil, err
	}
	ca, err := client.RotationV1alpha1().CertificateAuthorities().Get(contextOf(cmd), name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("cannot read CertificateAuthority %q: %s", name, statusMessage(err))
	}
	return ca, nil
}
