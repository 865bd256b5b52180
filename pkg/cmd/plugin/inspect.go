package plugin

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/registry/printers"
	"rekey.io/rekey/pkg/signing"
)

// newInspectCommand is `kubectl rekey inspect NAME`.
func newInspectCommand(newClient func() (clientset.Interface, error), newKube func() (kubernetes.Interface, error), streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect NAME",
		Short: "Show a certificate request decoded: its request, its certificate, the CA key that issued it, conditions and events",
		Long: `Show a rekey CertificateSigningRequest decoded: the PKCS#10 request
(subject, subject alternative names, key, usages, the lifetime asked for),
the certificate issued (subject, subject alternative names, key usages,
serial, validity, issuer), which CertificateAuthority issued it and whether
with its current key or its previous one (a rotation is under way: renew
before it completes) or with neither (the CA has rotated since: the
certificate is no longer trusted once the old CA is dropped), the
conditions with their reasons and messages, and the host cluster's events
about the request ("none" where there are none, as on a standalone server).

Reading the issuing CA needs get on signers and certificateauthorities; the
rest of the output is shown without it.`,
		Example: `  kubectl rekey inspect alice`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := contextOf(cmd)
			client, err := newClient()
			if err != nil {
				return err
			}
			csr, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, args[0], metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("cannot read certificatesigningrequest %q: %s", args[0], statusMessage(err))
			}
			inspect(ctx, streams.Out, client, newKube, csr, time.Now())
			return nil
		},
		// NAME is completed by the Completer (completion.go).
	}
}

func inspect(ctx context.Context, out io.Writer, client clientset.Interface, newKube func() (kubernetes.Interface, error), csr *certv1alpha1.CertificateSigningRequest, now time.Time) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "Name:\t%s\n", printable(csr.Name))
	fmt.Fprintf(w, "Signer:\t%s\n", printable(csr.Spec.SignerName))
	requester := printable(csr.Spec.Username)
	if len(csr.Spec.Groups) > 0 {
		groups := make([]string, len(csr.Spec.Groups))
		for i, g := range csr.Spec.Groups {
			groups[i] = printable(g)
		}
		requester += " (groups " + strings.Join(groups, ", ") + ")"
	}
	fmt.Fprintf(w, "Requester:\t%s\n", requester)
	fmt.Fprintf(w, "Created:\t%s (%s ago)\n", csr.CreationTimestamp.UTC().Format(time.RFC3339), age(csr.CreationTimestamp.Time, now))
	fmt.Fprintf(w, "State:\t%s\n", state(csr))

	fmt.Fprintf(w, "Request:\t\n")
	if req, err := requestOf(csr); err != nil {
		fmt.Fprintf(w, "  Error:\t%s\n", printable(err.Error()))
	} else {
		fmt.Fprintf(w, "  Subject:\t%s\n", noneIfEmpty(printable(req.Subject.String())))
		fmt.Fprintf(w, "  SANs:\t%s\n", requestSANs(req))
		fmt.Fprintf(w, "  Key:\t%s\n", keyDescription(req.PublicKey))
	}
	fmt.Fprintf(w, "  Usages:\t%s\n", noneIfEmpty(joinKeyUsages(csr.Spec.Usages)))
	if s := csr.Spec.ExpirationSeconds; s != nil {
		fmt.Fprintf(w, "  Duration asked:\t%s\n", time.Duration(*s)*time.Second)
	} else {
		fmt.Fprintf(w, "  Duration asked:\tthe signer's default\n")
	}

	fmt.Fprintf(w, "Certificate:\t")
	if len(csr.Status.Certificate) == 0 {
		fmt.Fprintf(w, "none\n")
	} else if certs, err := validation.ParseCertificateChain(csr.Status.Certificate); err != nil {
		fmt.Fprintf(w, "does not parse: %s\n", printable(err.Error()))
	} else {
		leaf := certs[0]
		fmt.Fprintf(w, "\n  Subject:\t%s\n", noneIfEmpty(printable(leaf.Subject.String())))
		fmt.Fprintf(w, "  SANs:\t%s\n", certSANs(leaf))
		fmt.Fprintf(w, "  Key:\t%s\n", keyDescription(leaf.PublicKey))
		fmt.Fprintf(w, "  Key usage:\t%s\n", noneIfEmpty(strings.Join(x509Usages(leaf), ", ")))
		fmt.Fprintf(w, "  Serial:\t%s\n", printers.SerialHex(leaf.SerialNumber))
		fmt.Fprintf(w, "  Valid:\t%s to %s (%s)\n", leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339), validity(leaf, now))
		fmt.Fprintf(w, "  Issuer:\t%s\n", printable(leaf.Issuer.String()))
		fmt.Fprintf(w, "  Issuing CA:\t%s\n", printable(issuingCA(ctx, client, csr.Spec.SignerName, leaf)))
		if len(leaf.CRLDistributionPoints) > 0 {
			fmt.Fprintf(w, "  CRL:\t%s\n", printable(strings.Join(leaf.CRLDistributionPoints, ", ")))
		}
		if len(certs) > 1 {
			fmt.Fprintf(w, "  Chain:\t%d more certificates after the leaf\n", len(certs)-1)
		}
	}
	_ = w.Flush()

	fmt.Fprintln(out, "Conditions:")
	if len(csr.Status.Conditions) == 0 {
		fmt.Fprintln(out, "  none")
	} else {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tAGE\tMESSAGE")
		for _, c := range csr.Status.Conditions {
			at := c.LastUpdateTime.Time
			if at.IsZero() {
				at = c.LastTransitionTime.Time
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", printable(string(c.Type)), printable(string(c.Status)), printable(orDash(c.Reason)), age(at, now), printable(c.Message))
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(out, "Events:")
	printRequestEvents(ctx, out, newKube, csr, now)
}

// state is where a request stands, in a few words.
func state(csr *certv1alpha1.CertificateSigningRequest) string {
	if c := certv1alpha1.GetCondition(csr, certv1alpha1.CertificateRevoked); c != nil {
		return "Issued, Revoked (" + c.Reason + ")"
	}
	switch s := requestState(csr); s {
	case "Approved":
		return "Approved, not issued yet"
	case "Pending":
		if c := certv1alpha1.GetCondition(csr, certv1alpha1.CertificateAttested); c != nil && c.Status == metav1.ConditionFalse {
			return "Pending, attestation refused (never approved)"
		}
		return "Pending approval"
	default:
		return s
	}
}

func requestOf(csr *certv1alpha1.CertificateSigningRequest) (*x509.CertificateRequest, error) {
	return validation.ParseStoredCSR(csr.Spec.Request)
}

func requestSANs(req *x509.CertificateRequest) string {
	return formatSANs(req.DNSNames, req.IPAddresses, req.EmailAddresses, req.URIs)
}

func certSANs(c *x509.Certificate) string {
	return formatSANs(c.DNSNames, c.IPAddresses, c.EmailAddresses, c.URIs)
}

func formatSANs[IP fmt.Stringer, U fmt.Stringer](dns []string, ips []IP, emails []string, uris []U) string {
	var out []string
	for _, n := range dns {
		out = append(out, "DNS:"+printable(n))
	}
	for _, ip := range ips {
		out = append(out, "IP:"+ip.String())
	}
	for _, e := range emails {
		out = append(out, "email:"+printable(e))
	}
	for _, u := range uris {
		out = append(out, "URI:"+printable(u.String()))
	}
	return noneIfEmpty(strings.Join(out, ", "))
}

func joinKeyUsages(us []certv1alpha1.KeyUsage) string {
	s := make([]string, len(us))
	for i, u := range us {
		s[i] = string(u)
	}
	return strings.Join(s, ", ")
}

// x509Usages names a certificate's key usages and extended key usages as
// the API does.
func x509Usages(c *x509.Certificate) []string {
	var out []string
	for _, ku := range []struct {
		bit  x509.KeyUsage
		name certv1alpha1.KeyUsage
	}{
		{x509.KeyUsageDigitalSignature, certv1alpha1.UsageDigitalSignature}, {x509.KeyUsageContentCommitment, certv1alpha1.UsageContentCommitment},
		{x509.KeyUsageKeyEncipherment, certv1alpha1.UsageKeyEncipherment}, {x509.KeyUsageDataEncipherment, certv1alpha1.UsageDataEncipherment},
		{x509.KeyUsageKeyAgreement, certv1alpha1.UsageKeyAgreement}, {x509.KeyUsageCertSign, certv1alpha1.UsageCertSign},
		{x509.KeyUsageCRLSign, certv1alpha1.UsageCRLSign}, {x509.KeyUsageEncipherOnly, certv1alpha1.UsageEncipherOnly},
		{x509.KeyUsageDecipherOnly, certv1alpha1.UsageDecipherOnly},
	} {
		if c.KeyUsage&ku.bit != 0 {
			out = append(out, string(ku.name))
		}
	}
	ekus := map[x509.ExtKeyUsage]certv1alpha1.KeyUsage{
		x509.ExtKeyUsageAny: certv1alpha1.UsageAny, x509.ExtKeyUsageServerAuth: certv1alpha1.UsageServerAuth,
		x509.ExtKeyUsageClientAuth: certv1alpha1.UsageClientAuth, x509.ExtKeyUsageCodeSigning: certv1alpha1.UsageCodeSigning,
		x509.ExtKeyUsageEmailProtection: certv1alpha1.UsageEmailProtection, x509.ExtKeyUsageIPSECEndSystem: certv1alpha1.UsageIPsecEndSystem,
		x509.ExtKeyUsageIPSECTunnel: certv1alpha1.UsageIPsecTunnel, x509.ExtKeyUsageIPSECUser: certv1alpha1.UsageIPsecUser,
		x509.ExtKeyUsageTimeStamping: certv1alpha1.UsageTimestamping, x509.ExtKeyUsageOCSPSigning: certv1alpha1.UsageOCSPSigning,
		x509.ExtKeyUsageMicrosoftServerGatedCrypto: certv1alpha1.UsageMicrosoftSGC, x509.ExtKeyUsageNetscapeServerGatedCrypto: certv1alpha1.UsageNetscapeSGC,
	}
	for _, e := range c.ExtKeyUsage {
		if name, ok := ekus[e]; ok {
			out = append(out, string(name))
		} else {
			out = append(out, fmt.Sprintf("extended key usage %d", e))
		}
	}
	for _, oid := range c.UnknownExtKeyUsage {
		out = append(out, oid.String())
	}
	return out
}

func validity(c *x509.Certificate, now time.Time) string {
	switch {
	case now.Before(c.NotBefore):
		return "not valid yet"
	case now.After(c.NotAfter):
		return fmt.Sprintf("expired %s ago", age(c.NotAfter, now))
	}
	return fmt.Sprintf("expires in %s", duration.HumanDuration(c.NotAfter.Sub(now)))
}

// issuingCA names the CertificateAuthority of the request's signer and
// which of its keys signed the certificate: the one that signs now
// (current), the one a rotation is taking out (previous: renew before the
// rotation completes), the next one, or none of them (the CA rotated
// since). The signature is checked, not only the names.
func issuingCA(ctx context.Context, client clientset.Interface, signerName string, leaf *x509.Certificate) string {
	signer, err := client.CertificatesV1alpha1().Signers().Get(ctx, validation.SignerObjectName(signerName), metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("unknown (reading the Signer of %q: %s)", signerName, statusMessage(err))
	}
	caName := signer.Spec.CertificateAuthorityRef.Name
	ca, err := client.RotationV1alpha1().CertificateAuthorities().Get(ctx, caName, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("%s, key unknown (reading the CertificateAuthority: %s)", caName, statusMessage(err))
	}
	return caName + ", " + whichKey(ca, leaf)
}

func whichKey(ca *rotationv1alpha1.CertificateAuthority, leaf *x509.Certificate) string {
	for _, k := range []struct {
		cert *rotationv1alpha1.CACertificate
		says string
	}{
		{ca.Status.Current, "its current key"},
		{ca.Status.Previous, "its previous key (a rotation is taking it out: renew before the rotation completes)"},
		{ca.Status.Next, "its next key"},
	} {
		if k.cert == nil {
			continue
		}
		caCert, err := parseCACertificate(k.cert.Certificate)
		if err != nil || leaf.CheckSignatureFrom(caCert) != nil {
			continue
		}
		keyID := k.cert.KeyID
		if keyID == "" {
			keyID = signing.Fingerprint(caCert)
		}
		return fmt.Sprintf("%s (%s)", k.says, keyID)
	}
	return "neither its current nor its previous key: the CA has rotated since (or another CA signed it); it is no longer trusted where the CA's bundle is"
}

func parseCACertificate(pemData string) (*x509.Certificate, error) {
	certs, err := validation.ParseCertificateChain([]byte(pemData))
	if err != nil {
		return nil, err
	}
	return certs[0], nil
}

// printRequestEvents prints the host cluster's events about the request
// (rekey records them in the host cluster's namespace default, where there
// is one). A standalone server serves no events: "none".
func printRequestEvents(ctx context.Context, out io.Writer, newKube func() (kubernetes.Interface, error), csr *certv1alpha1.CertificateSigningRequest, now time.Time) {
	none := func(why string) {
		if why == "" {
			fmt.Fprintln(out, "  none")
			return
		}
		fmt.Fprintf(out, "  none (%s)\n", why)
	}
	if newKube == nil {
		none("")
		return
	}
	kube, err := newKube()
	if err != nil {
		none(err.Error())
		return
	}
	// rekey's event recorder writes the events of a cluster-scoped object
	// to namespace default (client-go's record package does); only there,
	// and only events naming this object's UID, are rekey's. Anyone who can
	// create events in some namespace could otherwise show an approver an
	// Approved or Issued event of their own making.
	selector := fields.Set{"involvedObject.kind": "CertificateSigningRequest", "involvedObject.name": csr.Name, "involvedObject.uid": string(csr.UID)}.AsSelector().String()
	list, err := kube.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		// A standalone server has no events API: nothing was recorded.
		none("")
		return
	}
	var events []corev1.Event
	for _, e := range list.Items {
		// Checked here too, whatever the server made of the selector:
		// certificates.k8s.io requests of the same name are another
		// object, and an event without this request's UID is not rekey's.
		if e.Namespace == metav1.NamespaceDefault && e.InvolvedObject.Kind == "CertificateSigningRequest" && e.InvolvedObject.Name == csr.Name &&
			strings.HasPrefix(e.InvolvedObject.APIVersion, certv1alpha1.GroupName+"/") && csr.UID != "" && e.InvolvedObject.UID == csr.UID {
			events = append(events, e)
		}
	}
	if len(events) == 0 {
		none("")
		return
	}
	last := func(e corev1.Event) time.Time {
		switch {
		case !e.LastTimestamp.IsZero():
			return e.LastTimestamp.Time
		case !e.EventTime.IsZero():
			return e.EventTime.Time
		}
		return e.FirstTimestamp.Time
	}
	slices.SortFunc(events, func(a, b corev1.Event) int { return last(a).Compare(last(b)) })
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TYPE\tREASON\tAGE\tFROM\tMESSAGE")
	for _, e := range events {
		from := e.Source.Component
		if from == "" {
			from = e.ReportingController
		}
		count := ""
		if e.Count > 1 {
			count = fmt.Sprintf(" (x%d)", e.Count)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s%s\t%s\t%s\n", printable(e.Type), printable(e.Reason), age(last(e), now), count, printable(orDash(from)), printable(e.Message))
	}
	_ = tw.Flush()
}

func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t))
}

// noneIfEmpty: inspect says "none" for an empty field.
func noneIfEmpty(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printable shows a string the server returned, which a requester or
// anyone who can write events may have chosen, so that it cannot drive the
// terminal: a string with a control character, a format character (such
// as a bidirectional override) or invalid UTF-8 is shown Go-quoted, its
// escapes visible ("CN=a\x1b[2K..."); any other string as it is. Without
// this a common name "system:admin\x1b[2K\rCN=alice" would read CN=alice.
func printable(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
