package plugin

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/pager"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

// consumerPageSize is how many TrustConsumers one list request asks for:
// a CA may have one consumer per node (thousands), which the server need
// not send in one answer.
const consumerPageSize = 500

// maxConsumersShown caps the consumer table of `kubectl rekey status`;
// `kubectl rekey consumers CA` lists them all.
const maxConsumersShown = 50

// listConsumers returns the TrustConsumers naming one of the CAs (all
// TrustConsumers when none is given), sorted by name. TrustConsumers have
// no field selector for the CAs they name, so they are listed a page at a
// time and filtered here; only the matching ones are kept.
func listConsumers(ctx context.Context, client clientset.Interface, cas ...string) ([]*rotationv1alpha1.TrustConsumer, error) {
	p := pager.New(pager.SimplePageFunc(func(opts metav1.ListOptions) (runtime.Object, error) {
		return client.RotationV1alpha1().TrustConsumers().List(ctx, opts)
	}))
	p.PageSize = consumerPageSize
	var out []*rotationv1alpha1.TrustConsumer
	err := p.EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		tc, ok := obj.(*rotationv1alpha1.TrustConsumer)
		if !ok {
			return fmt.Errorf("unexpected %T in a TrustConsumer list", obj)
		}
		if len(cas) == 0 || slices.ContainsFunc(tc.Spec.CertificateAuthorities, func(n string) bool { return slices.Contains(cas, n) }) {
			out = append(out, tc)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot list TrustConsumers: %s", statusMessage(err))
	}
	slices.SortFunc(out, func(a, b *rotationv1alpha1.TrustConsumer) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// heldOf is what a consumer last reported for one CA (nil: nothing).
func heldOf(tc *rotationv1alpha1.TrustConsumer, caName string) *rotationv1alpha1.TrustHeld {
	for i := range tc.Status.Holds {
		if tc.Status.Holds[i].CertificateAuthority == caName {
			return &tc.Status.Holds[i]
		}
	}
	return nil
}

// newCA is the CA certificate a consumer must hold for a rotation to go
// on: the next CA while Preparing, else the one that signs.
func newCA(s *rotationv1alpha1.CertificateAuthorityStatus) *rotationv1alpha1.CACertificate {
	if s.Next != nil {
		return s.Next
	}
	return s.Current
}

// consumersResult is the client-side listing `kubectl rekey status` shows
// beside the CA: the consumers naming it, or why they could not be listed.
type consumersResult struct {
	items []*rotationv1alpha1.TrustConsumer
	err   error
}

// printConsumerTable prints the consumers naming ca, those that do not
// hold the new CA (the ones a Preparing rotation waits for) first, at most
// maxConsumersShown.
func printConsumerTable(out io.Writer, ca *rotationv1alpha1.CertificateAuthority, consumers consumersResult) {
	if consumers.err != nil {
		fmt.Fprintf(out, "\nTrust consumers: %v\n", consumers.err)
		return
	}
	if len(consumers.items) == 0 {
		return
	}
	target := ""
	if c := newCA(&ca.Status); c != nil {
		target = c.Fingerprint
	}
	type row struct {
		tc    *rotationv1alpha1.TrustConsumer
		held  *rotationv1alpha1.TrustHeld
		holds bool
	}
	rows := make([]row, 0, len(consumers.items))
	waiting := 0
	for _, tc := range consumers.items {
		h := heldOf(tc, ca.Name)
		r := row{tc: tc, held: h, holds: target != "" && h != nil && slices.Contains(h.Fingerprints, target)}
		if !r.holds {
			waiting++
		}
		rows = append(rows, r)
	}
	// Stable: waited-for first, then by name (the list is sorted by name).
	slices.SortStableFunc(rows, func(a, b row) int {
		switch {
		case a.holds == b.holds:
			return 0
		case !a.holds:
			return -1
		}
		return 1
	})
	column, what := "HOLDS NEW CA", "new CA"
	if ca.Status.Phase == rotationv1alpha1.PhaseNone {
		column, what = "HOLDS CA", "CA"
	}
	fmt.Fprintf(out, "\nTrust consumers (%d, %d not holding the %s; those first):\n", len(rows), waiting, what)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NAME\t%s\tREPORTED\tREPORTER\n", column)
	for _, r := range rows[:min(len(rows), maxConsumersShown)] {
		holds, reported := "no", "<never>"
		if r.holds {
			holds = "yes"
		}
		if r.held != nil && r.held.ReportTime != nil {
			reported = r.held.ReportTime.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.tc.Name, holds, reported, orNone(r.tc.Spec.Reporter))
	}
	_ = tw.Flush()
	if len(rows) > maxConsumersShown {
		fmt.Fprintf(out, "... and %d more (kubectl rekey consumers %s lists them all)\n", len(rows)-maxConsumersShown, ca.Name)
	}
}

// printTrust prints the trust section of a CA's status: how far the next
// CA has spread and what a Preparing rotation waits for.
func printTrust(w io.Writer, ca *rotationv1alpha1.CertificateAuthority) {
	s := ca.Status
	cond := apimeta.FindStatusCondition(s.Conditions, rotationv1alpha1.CertificateAuthorityTrustPropagated)
	if s.Trust == nil && cond == nil {
		return
	}
	if cond != nil {
		fmt.Fprintf(w, "Trust:\t%s (%s): %s\n", cond.Status, cond.Reason, cond.Message)
	}
	t := s.Trust
	if t == nil {
		t = &rotationv1alpha1.TrustStatus{}
	}
	propagation := rotationv1alpha1.DefaultTrustPropagation
	if r := ca.Spec.Rotation; r != nil && r.TrustPropagation != nil {
		propagation = r.TrustPropagation.Duration
	}
	switch {
	case t.PublishedTime != nil && s.Phase == rotationv1alpha1.PhasePreparing:
		fmt.Fprintf(w, "  Published:\t%s (trustPropagation %s: ends %s)\n", t.PublishedTime.UTC().Format(time.RFC3339), propagation,
			t.PublishedTime.Add(propagation).UTC().Format(time.RFC3339))
	case t.PublishedTime != nil:
		fmt.Fprintf(w, "  Published:\t%s\n", t.PublishedTime.UTC().Format(time.RFC3339))
	case s.Phase == rotationv1alpha1.PhasePreparing:
		fmt.Fprintf(w, "  Published:\tnot yet in every bundle rekey writes\n")
	}
	for _, u := range t.Unpublished {
		fmt.Fprintf(w, "  Unpublished:\t%s\n", u)
	}
	if s.Phase != rotationv1alpha1.PhasePreparing {
		// status.trust stays as it stood when the rotation ended its
		// wait; the table below shows what the consumers hold now.
		fmt.Fprintf(w, "  Consumers:\t%d naming this CA, %d not holding the new CA when it became Prepared\n", t.Consumers, t.Waiting)
	} else {
		fmt.Fprintf(w, "  Consumers:\t%d naming this CA, %d not holding the new CA\n", t.Consumers, t.Waiting)
	}
	if len(t.WaitingFor) > 0 && s.Phase == rotationv1alpha1.PhasePreparing {
		more := ""
		if n := int(t.Waiting) - len(t.WaitingFor); n > 0 {
			more = fmt.Sprintf(" and %d more", n)
		}
		fmt.Fprintf(w, "  Waiting for:\t%s%s\n", strings.Join(t.WaitingFor, ", "), more)
	}
	if t.OverriddenTime != nil {
		fmt.Fprintf(w, "  Overridden:\t%s (Prepare with force: the new CA signs whether consumers trust it or not)\n", t.OverriddenTime.UTC().Format(time.RFC3339))
	}
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// newConsumersCommand is `kubectl rekey consumers [CA...]`.
func newConsumersCommand(newClient func() (clientset.Interface, error), streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "consumers [CA...]",
		Short: "List TrustConsumers (of the given CertificateAuthorities, or all) and which CA certificates each last reported holding",
		Long: `Lists one row per TrustConsumer and CertificateAuthority it names. HOLDS names
the certificates of the CA's status the consumer reported holding: current,
next (a Preparing rotation's new CA, which a rotation waits for) and
previous; "other" counts fingerprints the CA no longer has.

You need list on trustconsumers and get on certificateauthorities (group
rotation.rekey.io); the role rekey:ca-rotator has both.`,
		Example: "  kubectl rekey consumers\n  kubectl rekey consumers rekey.io-kube-apiserver-client",
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := newClient()
			if err != nil {
				return err
			}
			ctx := contextOf(cmd)
			cas := make([]string, len(args))
			for i, a := range args {
				cas[i] = caName(a)
			}
			consumers, err := listConsumers(ctx, client, cas...)
			if err != nil {
				return err
			}
			if len(consumers) == 0 {
				fmt.Fprintln(streams.ErrOut, "No trust consumers found.")
				return nil
			}
			// The CAs are read once each: few, and their status says
			// which fingerprint is which.
			read := map[string]*rotationv1alpha1.CertificateAuthority{}
			tw := tabwriter.NewWriter(streams.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tCA\tHOLDS\tREPORTED\tREPORTER")
			for _, tc := range consumers {
				for _, name := range tc.Spec.CertificateAuthorities {
					if len(cas) > 0 && !slices.Contains(cas, name) {
						continue
					}
					ca, ok := read[name]
					if !ok {
						if ca, err = client.RotationV1alpha1().CertificateAuthorities().Get(ctx, name, metav1.GetOptions{}); err != nil {
							ca = nil
						}
						read[name] = ca
					}
					h := heldOf(tc, name)
					reported := "<never>"
					if h != nil && h.ReportTime != nil {
						reported = h.ReportTime.UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", tc.Name, name, describeHeld(ca, h), reported, orNone(tc.Spec.Reporter))
				}
			}
			return tw.Flush()
		},
	}
}

// describeHeld names what a consumer holds of a CA by the certificates of
// the CA's status ("current,next"); ca is nil when it could not be read.
func describeHeld(ca *rotationv1alpha1.CertificateAuthority, h *rotationv1alpha1.TrustHeld) string {
	if h == nil || len(h.Fingerprints) == 0 {
		return "<nothing reported>"
	}
	if ca == nil {
		return fmt.Sprintf("%d certificate(s) (CA not readable)", len(h.Fingerprints))
	}
	var parts []string
	other := len(h.Fingerprints)
	for _, c := range []struct {
		label string
		cert  *rotationv1alpha1.CACertificate
	}{{"previous", ca.Status.Previous}, {"current", ca.Status.Current}, {"next", ca.Status.Next}} {
		if c.cert != nil && slices.Contains(h.Fingerprints, c.cert.Fingerprint) {
			parts = append(parts, c.label)
			other--
		}
	}
	if other > 0 {
		parts = append(parts, fmt.Sprintf("other(%d)", other))
	}
	return strings.Join(parts, ",")
}
