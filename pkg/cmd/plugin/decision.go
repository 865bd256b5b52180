package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// requestResource prefixes the names approve and deny print, as kubectl
// names objects (-o name prints exactly this).
const requestResource = "certificatesigningrequest.certificates.rekey.io/"

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

// Values of --dry-run, as kubectl spells them.
const (
	dryRunNone   = "none"
	dryRunServer = "server"
	dryRunClient = "client"
)

// defaultApproveWait is how long approve waits for the certificate when
// the approval write did not carry it: rekey's signer controller signs
// within a second or two when the write could not, so a few seconds tell
// "issued" from "nothing is signing it" without holding a script up.
const defaultApproveWait = 5 * time.Second

type decisionOptions struct {
	decision
	reason, message string
	force           bool
	filenames       []string
	recursive       bool
	output          string
	dryRun          string
	wait            time.Duration
	newClient       func() (clientset.Interface, error)
	streams         genericiooptions.IOStreams
}

func newDecisionCommand(d decision, newClient func() (clientset.Interface, error), streams genericiooptions.IOStreams) *cobra.Command {
	o := &decisionOptions{decision: d, newClient: newClient, streams: streams}
	// "an Approved", "a Denied".
	article := "a"
	if strings.ContainsRune("AEIOU", rune(d.condition[0])) {
		article = "an"
	}
	long := fmt.Sprintf(`Add %[4]s %[1]s condition to rekey CertificateSigningRequests
(certificates.rekey.io) through their /approval subresource. Name the
requests as arguments, in resource files (-f FILE, as kubectl does; "-f -"
reads standard input), or both. Each is decided on its own: one that fails
is reported and the others still go ahead; the exit code is non-zero if any
failed.

A request that is already %[2]s is left alone unless --force is given; one
that already carries %[3]s is refused, since the two conditions are mutually
exclusive and permanent. --dry-run=server sends the write with dryRun=All:
the server checks your permission and the request but stores nothing (and
signs nothing); --dry-run=client only reads the request.

You need update on certificatesigningrequests/approval and verb "approve" on
resource "signers" (group certificates.rekey.io) named after the request's
signer or "<domain>/*".`, d.condition, d.past, d.opposite, article)
	example := fmt.Sprintf(`  kubectl rekey %[1]s my-request --reason=Verified --message="checked the node's serial"
  kubectl rekey %[1]s req-a req-b -o name
  kubectl rekey %[1]s -f artifacts/examples/csr.yaml --dry-run=server`, d.verb)
	if d.verb == decisionApprove.verb {
		long += `

rekey signs a request of a signer it serves in the approval write itself,
or its signer controller signs it shortly after. approve prints the
outcome: the certificate's subject and expiry, or, when the request ends
Failed, the rule it broke (the condition's reason and message) on standard
error, with a non-zero exit code. When the approval write did not carry
the certificate, approve waits up to --wait for it (not at all when no
Signer serves the signer name: rekey will not sign it); when there is
none by then, it says why nothing signs it if it can tell: no Signer serves the
signer name (an external signer has to sign it), the Signer or its
CertificateAuthority is not Ready (its key store unreachable, its key not
made yet), or the CertificateAuthority is Preparing a rotation. Reading
those needs get on signers (certificates.rekey.io) and
certificateauthorities (rotation.rekey.io); without it approve says it
cannot tell.`
		example += `
  kubectl rekey approve my-request --wait=30s`
	}
	cmd := &cobra.Command{
		Use:     d.verb + " (NAME... | -f FILENAME)",
		Short:   fmt.Sprintf("%s rekey certificate signing requests (add %s %s condition)", strings.ToUpper(d.verb[:1])+d.verb[1:], article, d.condition),
		Long:    long,
		Example: example,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(contextOf(cmd), args)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.reason, "reason", d.reason, "Short CamelCase reason recorded in the condition.")
	fs.StringVar(&o.message, "message", "", "Human-readable message recorded in the condition.")
	fs.BoolVar(&o.force, "force", false, fmt.Sprintf("Update the condition even if the request is already %s.", d.past))
	fs.StringSliceVarP(&o.filenames, "filename", "f", nil, fmt.Sprintf("Files, directories or - (standard input) holding the CertificateSigningRequests (certificates.rekey.io) to %s: YAML or JSON, several documents or a List.", d.verb))
	fs.BoolVarP(&o.recursive, "recursive", "R", false, "Process the directories given with -f recursively.")
	fs.StringVarP(&o.output, "output", "o", "", `"name" prints only certificatesigningrequest.certificates.rekey.io/<name> per request.`)
	fs.StringVar(&o.dryRun, "dry-run", dryRunNone, `"none", "server" or "client". server: the server checks the write (permission, state) without storing it; client: only read the request and say what would be done. --dry-run alone means server.`)
	fs.Lookup("dry-run").NoOptDefVal = dryRunServer
	if d.verb == decisionApprove.verb {
		fs.DurationVar(&o.wait, "wait", defaultApproveWait, "How long to wait for the certificate (or the failure) when the approval write did not carry it; 0 does not wait.")
	}
	_ = cmd.MarkFlagFilename("filename", "json", "yaml", "yml")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"name"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("dry-run", cobra.FixedCompletions([]string{dryRunNone, dryRunServer, dryRunClient}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (o *decisionOptions) run(ctx context.Context, args []string) error {
	switch o.output {
	case "", "name":
	default:
		return fmt.Errorf("--output %q is not supported: only \"name\"", o.output)
	}
	switch o.dryRun {
	case dryRunNone, dryRunServer, dryRunClient:
	default:
		return fmt.Errorf(`--dry-run %q: must be "none", "server" or "client"`, o.dryRun)
	}
	if o.wait < 0 {
		return fmt.Errorf("--wait must not be negative")
	}
	names := append([]string(nil), args...)
	if len(o.filenames) > 0 {
		fromFiles, err := requestNamesFromFiles(o.filenames, o.recursive, o.streams.In)
		if err != nil {
			return err
		}
		names = append(names, fromFiles...)
	}
	names = dedupe(names)
	if len(names) == 0 {
		if len(o.filenames) > 0 {
			return fmt.Errorf("no CertificateSigningRequests found in %s", strings.Join(o.filenames, ", "))
		}
		return fmt.Errorf("name the requests to %s (NAME... or -f FILENAME)", o.verb)
	}
	client, err := o.newClient()
	if err != nil {
		return err
	}
	failed := false
	for _, name := range names {
		if err := o.decide(ctx, client, name); err != nil {
			failed = true
			fmt.Fprintf(o.streams.ErrOut, "error: %v\n", err)
		}
	}
	if failed {
		return errAlreadyReported
	}
	return nil
}

// dedupe keeps the first of each name, in order: a request named twice
// (an argument and a file) is decided once.
func dedupe(names []string) []string {
	seen := map[string]bool{}
	out := names[:0]
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// errAlreadyReported makes main exit non-zero without printing again.
var errAlreadyReported = errors.New("")

// IsReported reports whether err has already been printed.
func IsReported(err error) bool { return errors.Is(err, errAlreadyReported) }

// decide writes the condition on one request (or, in a dry run, checks
// it) and reports what became of it. The error is what makes the exit
// code non-zero: a refused write, or an approval whose request Failed.
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
			unchanged, stored = true, csr
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
		if o.dryRun == dryRunClient {
			stored = csr
			return nil
		}
		opts := metav1.UpdateOptions{FieldManager: "kubectl-rekey"}
		if o.dryRun == dryRunServer {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		stored, err = csrs.UpdateApproval(ctx, name, csr, opts)
		return err
	})
	if err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
			return fmt.Errorf("cannot %s certificatesigningrequest %q: %s", o.verb, name, statusMessage(err))
		}
		return err
	}

	var suffix []string
	if unchanged {
		suffix = append(suffix, "(no change)")
	}
	switch o.dryRun {
	case dryRunServer:
		suffix = append(suffix, "(server dry run)")
	case dryRunClient:
		suffix = append(suffix, "(dry run)")
	}
	line := requestResource + name + " " + strings.Join(append([]string{o.past}, suffix...), " ")
	if o.dryRun != dryRunNone || o.condition != certv1alpha1.CertificateApproved {
		// Nothing is signed in a dry run, and a denial has no outcome.
		o.print(line, "")
		return nil
	}

	// An approval: what became of the request, from the write's response
	// or, when that did not carry it, after waiting for the signer.
	final, waitErr := stored, error(nil)
	waited := false
	if !decided(stored) && o.wait > 0 && !noSigner(ctx, client, stored.Spec.SignerName) {
		waited = true
		waitCtx, cancel := context.WithTimeout(ctx, o.wait)
		final, waitErr = waitForOutcome(waitCtx, client, stored)
		cancel()
	}
	if failed := certv1alpha1.GetCondition(final, certv1alpha1.CertificateFailed); failed != nil {
		o.print(line, "")
		return fmt.Errorf("certificatesigningrequest %q was approved but Failed: %s: %s", name, failed.Reason, failed.Message)
	}
	if len(final.Status.Certificate) > 0 {
		if o.output == "name" {
			// Issued is what a script expects: only the name.
			o.print(line, "")
		} else {
			o.print(line, issuedDescription(final))
		}
		return nil
	}
	// Not issued (yet): say why if we can tell.
	var why string
	switch {
	case errors.Is(waitErr, errRequestGone):
		why = "the request was deleted while waiting for its certificate"
	case waitErr != nil && !errors.Is(waitErr, context.DeadlineExceeded):
		why = fmt.Sprintf("cannot wait for the certificate (%s); %s", statusMessage(waitErr), whyNotIssued(ctx, client, final))
	default:
		why = whyNotIssued(ctx, client, final)
	}
	when := "not issued yet"
	if waited && (waitErr == nil || errors.Is(waitErr, context.DeadlineExceeded)) {
		when = fmt.Sprintf("not issued within %s", o.wait)
	}
	o.print(line, when+": "+why)
	return nil
}

// print writes the line for one request: with -o name its name alone on
// standard output and the note, if any (why it is not issued), on standard
// error, so that what scripts read stays names; otherwise one line with
// the note after "; ".
func (o *decisionOptions) print(line, note string) {
	if o.output == "name" {
		name, _, _ := strings.Cut(line, " ")
		fmt.Fprintln(o.streams.Out, name)
		if note != "" {
			fmt.Fprintf(o.streams.ErrOut, "%s: %s\n", name, note)
		}
		return
	}
	if note != "" {
		line += "; " + note
	}
	fmt.Fprintln(o.streams.Out, line)
}

// decided reports a request that has its certificate or Failed.
func decided(csr *certv1alpha1.CertificateSigningRequest) bool {
	return len(csr.Status.Certificate) > 0 || certv1alpha1.IsFailed(csr)
}

// issuedDescription names the certificate's subject and expiry.
func issuedDescription(csr *certv1alpha1.CertificateSigningRequest) string {
	certs, err := validation.ParseCertificateChain(csr.Status.Certificate)
	if err != nil || len(certs) == 0 {
		return "issued"
	}
	return fmt.Sprintf("issued to %q, valid until %s", certs[0].Subject.String(), certs[0].NotAfter.UTC().Format(time.RFC3339))
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

// noSigner reports whether no Signer serves signerName: then rekey will
// not sign the request, and waiting --wait for it only delays saying so
// (whyNotIssued explains). Any other answer, a Signer or an error such as
// forbidden, leaves the wait as it was.
func noSigner(ctx context.Context, client clientset.Interface, signerName string) bool {
	_, err := client.CertificatesV1alpha1().Signers().Get(ctx, validation.SignerObjectName(signerName), metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}
