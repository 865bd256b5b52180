package plugin

import (
	"context"
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

// newRotateCommand is `kubectl rekey rotate start|complete [--force] NAME`.
func newRotateCommand(newClient func() (clientset.Interface, error), namespace func() (string, error), streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rotate (start|complete) NAME | rcred/NAME",
		Short: "Start or complete the two-phase rotation of a CertificateAuthority, or the rotation of a RotatingCredential",
		Long: `Start makes a new CA key and certificate: the new CA signs from then on and
both are trusted (phase Preparing, then Prepared). Complete stops trusting the
old CA and destroys its key (Completing, then Completed); it is refused while
certificates of the old CA are still valid and not renewed, unless --force.

For a RotatingCredential (rcred/NAME, in -n NAMESPACE), Start mints a new
credential now (refused while a grace period runs) and Complete ends the grace
period now, revoking the previous credential at once (after a leak, say).

You need create on certificateauthorities/rotate or rotatingcredentials/rotate
(group rotation.rekey.io).`,
		Example: "  kubectl rekey rotate start team-ca\n  kubectl rekey status team-ca\n  kubectl rekey rotate complete team-ca\n  kubectl rekey rotate start rcred/db-password -n team-a",
	}
	for _, action := range []rotationv1alpha1.RotationAction{rotationv1alpha1.RotationStart, rotationv1alpha1.RotationComplete} {
		action := action
		var force bool
		sub := &cobra.Command{
			Use:   strings.ToLower(string(action)) + " NAME",
			Short: fmt.Sprintf("%s the rotation of a CertificateAuthority", action),
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
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
		if action == rotationv1alpha1.RotationComplete {
			sub.Flags().BoolVar(&force, "force", false, "Complete although certificates of the previous CA are still valid and not renewed; they stop verifying.")
		}
		cmd.AddCommand(sub)
	}
	return cmd
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
	if a == rotationv1alpha1.RotationStart {
		return "started"
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
		Short: "Show a CertificateAuthority's rotation (phase, times, old and new CA, who has not renewed) or a RotatingCredential's (mint time, next rotation, grace period, the Secret's keys)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if name, ok := credentialName(args[0]); ok {
				return credentialStatus(cmd, newClient, newKube, namespace, streams.Out, name)
			}
			ca, err := getCA(cmd, newClient, caName(args[0]))
			if err != nil {
				return err
			}
			printStatus(streams.Out, ca)
			return nil
		},
	}
}

func printStatus(out io.Writer, ca *rotationv1alpha1.CertificateAuthority) {
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
	}{{"Current CA:", s.Current}, {"Previous CA:", s.Previous}} {
		if c.cert != nil {
			fmt.Fprintf(w, "%s\t%s, valid %s to %s\n", c.label, c.cert.Fingerprint, c.cert.NotBefore.UTC().Format(time.RFC3339), c.cert.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	fmt.Fprintf(w, "Not renewed:\t%d\n", s.PendingRenewal)
	_ = w.Flush()
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
		Short:   "Print the PEM trust bundle of a CertificateAuthority (old and new CA during a rotation)",
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
