package plugin

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	attv1alpha1 "rekey.io/rekey/pkg/apis/attestation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

// newAttestCommand is `kubectl rekey attest status NODE`.
func newAttestCommand(newClient func() (clientset.Interface, error), streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "attest", Short: "Look at TPM node attestation"}
	cmd.AddCommand(&cobra.Command{
		Use:   "status NODE",
		Short: "Show a node's attestation: its EK and the node it is bound to, what was verified and when, or why it was refused",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := newClient()
			if err != nil {
				return err
			}
			na, err := client.AttestationV1alpha1().NodeAttestations().Get(contextOf(cmd), args[0], metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("cannot read NodeAttestation %q: %s", args[0], statusMessage(err))
			}
			printAttestation(streams.Out, na)
			return nil
		},
	})
	return cmd
}

func printAttestation(out io.Writer, na *attv1alpha1.NodeAttestation) {
	s := na.Status
	orNone := func(v string) string {
		if v == "" {
			return "<none>"
		}
		return v
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "Node:\t%s\n", na.Name)
	fmt.Fprintf(w, "Policy:\t%s\n", na.Spec.PolicyName)
	fmt.Fprintf(w, "Phase:\t%s\n", orNone(string(s.Phase)))
	fmt.Fprintf(w, "EK:\t%s\n", orNone(s.EKFingerprint))
	certified := "no (the policy must list the EK's key hash)"
	if len(na.Spec.EKCertificate) > 0 {
		certified = "yes"
	}
	fmt.Fprintf(w, "EK certificate:\t%s\n", certified)
	fmt.Fprintf(w, "Bound to node:\t%s\n", orNone(s.BoundNode))
	if c := s.Challenge; c != nil {
		fmt.Fprintf(w, "Challenge:\toutstanding until %s, PCRs %v\n", c.ExpirationTime.UTC().Format(time.RFC3339), c.PCRSelection)
	}
	if a := s.LastAttested; a != nil {
		first := ""
		if a.FirstUse {
			first = " (first use: the EK was bound then)"
		}
		fmt.Fprintf(w, "Last attested:\t%s%s\n", a.Time.UTC().Format(time.RFC3339), first)
		fmt.Fprintf(w, "  under policy:\t%s\n", a.PolicyName)
		fmt.Fprintf(w, "  PCRs quoted:\tsha256 %v\n", a.PCRIndexes)
		fmt.Fprintf(w, "  request:\t%s\n", a.Request)
	}
	if c := meta.FindStatusCondition(s.Conditions, "Ready"); c != nil {
		fmt.Fprintf(w, "Ready:\t%s (%s)\n", c.Status, c.Reason)
		fmt.Fprintf(w, "  message:\t%s\n", c.Message)
		fmt.Fprintf(w, "  since:\t%s\n", c.LastTransitionTime.UTC().Format(time.RFC3339))
	}
	_ = w.Flush()
}
