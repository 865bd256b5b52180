package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/util/retry"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

type decision struct {
	verb      string // approve or deny
	past      string // approved or denied
	condition certv1alpha1.RequestConditionType
	opposite  certv1alpha1.RequestConditionType
	reason    string
}

var (
	decisionApprove = decision{verb: "approve", past: "approved", condition: certv1alpha1.CertificateApproved, opposite: certv1alpha1.CertificateDenied, reason: "KubectlRekeyApprove"}
	decisionDeny    = decision{verb: "deny", past: "denied", condition: certv1alpha1.CertificateDenied, opposite: certv1alpha1.CertificateApproved, reason: "KubectlRekeyDeny"}
)

type decisionOptions struct {
	decision
	reason, message string
	force           bool
	newClient       func() (clientset.Interface, error)
	streams         genericiooptions.IOStreams
}

func newDecisionCommand(d decision, newClient func() (clientset.Interface, error), streams genericiooptions.IOStreams) *cobra.Command {
	o := &decisionOptions{decision: d, newClient: newClient, streams: streams}
	cmd := &cobra.Command{
		Use:   d.verb + " NAME...",
		Short: fmt.Sprintf("Add a %s condition to certificate signing requests", d.condition),
		Long: fmt.Sprintf(`Add a %[1]s condition to rekey CertificateSigningRequests through their
/approval subresource.

You need update on certificatesigningrequests/approval and verb "approve" on
resource "signers" (group certificates.rekey.io) named after the request's
signer or "<domain>/*". A request that is already %[2]s is left alone unless
--force is given; one that already carries %[3]s is refused, since the two
conditions are mutually exclusive and permanent.`, d.condition, d.past, d.opposite),
		Example: fmt.Sprintf("  kubectl rekey %s my-request --reason=Verified --message=\"checked the node's serial\"", d.verb),
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args)
		},
	}
	cmd.Flags().StringVar(&o.reason, "reason", d.reason, "Short CamelCase reason recorded in the condition.")
	cmd.Flags().StringVar(&o.message, "message", "", "Human-readable message recorded in the condition.")
	cmd.Flags().BoolVar(&o.force, "force", false, fmt.Sprintf("Update the condition even if the request is already %s.", d.past))
	return cmd
}

func (o *decisionOptions) run(ctx context.Context, names []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	client, err := o.newClient()
	if err != nil {
		return err
	}
	var failed []error
	for _, name := range names {
		if err := o.decide(ctx, client, name); err != nil {
			failed = append(failed, err)
			fmt.Fprintf(o.streams.ErrOut, "error: %v\n", err)
			continue
		}
	}
	if len(failed) > 0 {
		return errAlreadyReported
	}
	return nil
}

// errAlreadyReported makes main exit non-zero without printing again.
var errAlreadyReported = errors.New("")

// IsReported reports whether err has already been printed.
func IsReported(err error) bool { return errors.Is(err, errAlreadyReported) }

func (o *decisionOptions) decide(ctx context.Context, client clientset.Interface, name string) error {
	csrs := client.CertificatesV1alpha1().CertificateSigningRequests()
	message := o.message
	if message == "" {
		message = fmt.Sprintf("This request was %s by kubectl rekey %s.", o.past, o.verb)
	}
	unchanged := false
	var stored *certv1alpha1.CertificateSigningRequest
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		csr, err := csrs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		idx := -1
		for i, c := range csr.Status.Conditions {
			switch c.Type {
			case o.opposite:
				return fmt.Errorf("certificatesigningrequest %q is already %s; it cannot also be %s", name, pastOf(o.opposite), o.past)
			case o.condition:
				idx = i
			}
		}
		if idx >= 0 && !o.force {
			unchanged = true
			return nil
		}
		cond := certv1alpha1.CertificateSigningRequestCondition{
			Type: o.condition, Status: metav1.ConditionTrue, Reason: o.reason, Message: message,
			LastUpdateTime: metav1.Now(),
		}
		if idx >= 0 {
			cond.LastTransitionTime = csr.Status.Conditions[idx].LastTransitionTime
			csr.Status.Conditions[idx] = cond
		} else {
			csr.Status.Conditions = append(csr.Status.Conditions, cond)
		}
		stored, err = csrs.UpdateApproval(ctx, name, csr, metav1.UpdateOptions{FieldManager: "kubectl-rekey"})
		return err
	})
	if err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
			return fmt.Errorf("cannot %s certificatesigningrequest %q: %s", o.verb, name, statusMessage(err))
		}
		return err
	}
	suffix := ""
	if unchanged {
		suffix = " (no change)"
	}
	fmt.Fprintf(o.streams.Out, "certificatesigningrequest.certificates.rekey.io/%s %s%s%s\n", name, o.past, suffix, outcome(stored))
	return nil
}

// outcome describes what the approval write itself decided: rekey signs
// (or fails the request) in the same write for the signers it serves.
func outcome(csr *certv1alpha1.CertificateSigningRequest) string {
	if csr == nil {
		return ""
	}
	for _, c := range csr.Status.Conditions {
		if c.Type == certv1alpha1.CertificateFailed {
			return fmt.Sprintf("; failed: %s: %s", c.Reason, c.Message)
		}
	}
	if len(csr.Status.Certificate) == 0 {
		return ""
	}
	certs, err := validation.ParseCertificateChain(csr.Status.Certificate)
	if err != nil || len(certs) == 0 {
		return "; issued"
	}
	return fmt.Sprintf("; issued to %q, valid until %s", certs[0].Subject.String(), certs[0].NotAfter.UTC().Format(time.RFC3339))
}

func pastOf(t certv1alpha1.RequestConditionType) string {
	if t == certv1alpha1.CertificateApproved {
		return "approved"
	}
	return "denied"
}

func statusMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}
