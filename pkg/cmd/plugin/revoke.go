package plugin

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/registry/printers"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/strictpem"
)

// revocationResource prefixes what revoke prints, as kubectl names objects.
const revocationResource = "revocation.certificates.rekey.io/"

type revokeOptions struct {
	hostCSRs, pcrs, serials, sha256s, certFiles []string
	caName, reason, output                      string

	newClient func() (clientset.Interface, error)
	newKube   func() (kubernetes.Interface, error)
	namespace func() (string, error)
	streams   genericiooptions.IOStreams
}

// newRevokeCommand is `kubectl rekey revoke NAME... | --host-csr NAME |
// --pcr [NS/]NAME | --serial HEX [--ca CA] | --sha256 HEX [--reason R]`.
func newRevokeCommand(newClient func() (clientset.Interface, error), newKube func() (kubernetes.Interface, error), namespace func() (string, error), streams genericiooptions.IOStreams) *cobra.Command {
	o := &revokeOptions{newClient: newClient, newKube: newKube, namespace: namespace, streams: streams}
	cmd := &cobra.Command{
		Use:   "revoke (NAME... | --host-csr NAME | --pcr [NAMESPACE/]NAME | --serial HEX [--ca CA] | --sha256 HEX) [--reason REASON]",
		Short: "Revoke certificates rekey issued: kube-apiserver refuses them at once, and their CA's CRL lists them",
		Long: `Revoke a certificate rekey issued by creating a Revocation named after the
certificate's SHA-256. kube-apiserver then refuses requests made with it
(403, through rekey's authorization webhook), rekey refuses it too, and its
CertificateAuthority's CRL lists it. A revocation is not undone.

The certificate is named by the request it was issued for:
  NAME...            rekey CertificateSigningRequests (certificates.rekey.io)
  --host-csr NAME    the host cluster's CertificateSigningRequests
                     (certificates.k8s.io) that rekey signed
  --pcr [NS/]NAME    the host cluster's PodCertificateRequests that rekey
                     issued (in -n NAMESPACE unless NS/ is given)
or by the certificate itself:
  --sha256 HEX       its SHA-256 (what kube-apiserver's audit log shows as
                     credential-id X509SHA256=<hex>)
  --serial HEX       its serial number, in --ca CA (a CertificateAuthority)
                     or, without --ca, in whichever CA issued it

--reason is an RFC 5280 reason, in either spelling and any case:
Unspecified (the default), KeyCompromise (key-compromise), CACompromise,
AffiliationChanged, Superseded, CessationOfOperation, PrivilegeWithdrawn,
AACompromise.

Revoking a certificate that is revoked already succeeds ("already revoked").
You need create on revocations (group certificates.rekey.io) and verb
"revoke" on resource "signers" named after the certificate's signer or
"<domain>/*" (the ClusterRole in artifacts/rbac/revoker.yaml).`,
		Example: `  kubectl rekey revoke node-csr-abc --reason KeyCompromise
  kubectl rekey revoke --host-csr csr-x7k2p --reason key-compromise
  kubectl rekey revoke --pcr team-a/web-0-pcr-1
  kubectl rekey revoke --sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
  kubectl rekey revoke --serial 5a3c01f2 --ca team-ca --reason Superseded`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(contextOf(cmd), args)
		},
		ValidArgsFunction: func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			return o.issuedRequestNames(contextOf(cmd), toComplete), cobra.ShellCompDirectiveNoFileComp
		},
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&o.hostCSRs, "host-csr", nil, "a certificates.k8s.io CertificateSigningRequest of the host cluster whose certificate to revoke (repeatable)")
	fs.StringArrayVar(&o.pcrs, "pcr", nil, "a PodCertificateRequest of the host cluster, NAME in -n NAMESPACE or NAMESPACE/NAME, whose certificate to revoke (repeatable)")
	fs.StringArrayVar(&o.serials, "serial", nil, "the serial number (hex) of a certificate to revoke (repeatable)")
	fs.StringVar(&o.caName, "ca", "", "with --serial: the CertificateAuthority that issued it (default: any, refused when two issued the serial)")
	fs.StringArrayVar(&o.sha256s, "sha256", nil, "the SHA-256 (hex, of the DER) of a certificate to revoke (repeatable; X509SHA256= and colons are accepted)")
	fs.StringArrayVar(&o.certFiles, "cert", nil, "a PEM file whose first certificate to revoke (repeatable): for a certificate whose request is gone (rekey deletes issued requests after an hour)")
	fs.StringVar(&o.reason, "reason", string(certv1alpha1.RevocationReasonUnspecified), "the RFC 5280 reason: "+strings.Join(reasonNames(), ", ")+" (case and dashes do not matter)")
	fs.StringVarP(&o.output, "output", "o", "", "\"name\" prints only revocation.certificates.rekey.io/<sha256> per certificate")
	_ = cmd.RegisterFlagCompletionFunc("reason", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return reasonNames(), cobra.ShellCompDirectiveNoFileComp
	})
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"name"}, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// revocationReasons are the reasons the API accepts.
var revocationReasons = []certv1alpha1.RevocationReason{
	certv1alpha1.RevocationReasonUnspecified, certv1alpha1.RevocationReasonKeyCompromise, certv1alpha1.RevocationReasonCACompromise,
	certv1alpha1.RevocationReasonAffiliationChanged, certv1alpha1.RevocationReasonSuperseded, certv1alpha1.RevocationReasonCessationOfOperation,
	certv1alpha1.RevocationReasonPrivilegeWithdrawn, certv1alpha1.RevocationReasonAACompromise,
}

func reasonNames() []string {
	names := make([]string, len(revocationReasons))
	for i, r := range revocationReasons {
		names[i] = string(r)
	}
	return names
}

// parseReason accepts the API's CamelCase names and RFC 5280's own
// (keyCompromise, cACompromise), in any case, with dashes, underscores or
// spaces between the words (key-compromise).
func parseReason(s string) (certv1alpha1.RevocationReason, error) {
	fold := func(s string) string {
		return strings.ToLower(strings.NewReplacer("-", "", "_", "", " ", "").Replace(s))
	}
	for _, r := range revocationReasons {
		if fold(s) == fold(string(r)) {
			return r, nil
		}
	}
	return "", fmt.Errorf("--reason %q is not an RFC 5280 reason: one of %s", s, strings.Join(reasonNames(), ", "))
}

// target is one certificate to revoke: what the user named it by, and the
// spec that names it to the server.
type target struct {
	what string
	spec certv1alpha1.RevocationSpec
	// cert is the certificate, when the user named it by its request:
	// its subject and serial number are printed with the outcome.
	cert *x509.Certificate
	// err is why the certificate could not be found (reported per target).
	err error
}

func (o *revokeOptions) run(ctx context.Context, names []string) error {
	reason, err := parseReason(o.reason)
	if err != nil {
		return err
	}
	if o.output != "" && o.output != "name" {
		return fmt.Errorf("--output %q: only \"name\" is supported", o.output)
	}
	if len(names)+len(o.hostCSRs)+len(o.pcrs)+len(o.serials)+len(o.sha256s)+len(o.certFiles) == 0 {
		return errors.New("name the certificates to revoke: NAME (a rekey CertificateSigningRequest), --host-csr, --pcr, --serial or --sha256")
	}
	if o.caName != "" && len(o.serials) == 0 {
		return errors.New("--ca goes with --serial")
	}
	client, err := o.newClient()
	if err != nil {
		return err
	}
	targets := o.targets(ctx, client, names)
	failed := false
	for _, t := range targets {
		if t.err == nil {
			t.spec.Reason = reason
			t.err = o.revoke(ctx, client, t)
		}
		if t.err != nil {
			failed = true
			fmt.Fprintf(o.streams.ErrOut, "error: %v\n", t.err)
		}
	}
	if failed {
		return errAlreadyReported
	}
	return nil
}

// targets resolves every named certificate; one that cannot be found
// carries its error, so that the others are still revoked.
func (o *revokeOptions) targets(ctx context.Context, client clientset.Interface, names []string) []target {
	var out []target
	for _, name := range names {
		t := target{what: "certificatesigningrequest.certificates.rekey.io/" + name}
		csr, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.err = fmt.Errorf("cannot read %s: %s", t.what, statusMessage(err))
		} else {
			t.cert, t.spec.CertificateSHA256, t.err = issuedTo(t.what, requestKeyPEM(csr.Spec.Request), csr.Status.Certificate)
		}
		out = append(out, t)
	}
	if len(o.hostCSRs)+len(o.pcrs) > 0 {
		kube, err := o.newKube()
		for _, name := range o.hostCSRs {
			t := target{what: "certificatesigningrequest.certificates.k8s.io/" + name}
			if err != nil {
				t.err = err
			} else if csr, getErr := kube.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{}); getErr != nil {
				t.err = fmt.Errorf("cannot read %s: %s", t.what, statusMessage(getErr))
			} else {
				t.cert, t.spec.CertificateSHA256, t.err = issuedTo(t.what, requestKeyPEM(csr.Spec.Request), csr.Status.Certificate)
			}
			out = append(out, t)
		}
		for _, ref := range o.pcrs {
			ns, name, found := strings.Cut(ref, "/")
			if !found {
				name = ref
				if ns, err = o.namespace(); err != nil {
					out = append(out, target{what: "podcertificaterequest/" + ref, err: err})
					continue
				}
			}
			t := target{what: fmt.Sprintf("podcertificaterequest.certificates.k8s.io/%s (namespace %s)", name, ns)}
			if err != nil {
				t.err = err
			} else if pcr, getErr := kube.CertificatesV1().PodCertificateRequests(ns).Get(ctx, name, metav1.GetOptions{}); getErr != nil {
				t.err = fmt.Errorf("cannot read %s: %s", t.what, statusMessage(getErr))
			} else {
				t.cert, t.spec.CertificateSHA256, t.err = issuedTo(t.what, requestKeyDER("spec.stubPKCS10Request", pcr.Spec.StubPKCS10Request), []byte(pcr.Status.CertificateChain))
			}
			out = append(out, t)
		}
	}
	for _, serial := range o.serials {
		t := target{what: "serial " + serial, spec: certv1alpha1.RevocationSpec{CAName: o.caName}}
		t.spec.SerialNumber, t.err = normalizeSerial(serial)
		if o.caName != "" {
			t.what += " of CA " + o.caName
		}
		out = append(out, t)
	}
	for _, sum := range o.sha256s {
		t := target{what: "sha256 " + sum}
		t.spec.CertificateSHA256, t.err = normalizeHex("--sha256", strings.TrimPrefix(sum, "X509SHA256="), sha256.Size)
		out = append(out, t)
	}
	for _, file := range o.certFiles {
		out = append(out, certFileTarget(file))
	}
	return out
}

// issuedTo is the certificate issued for a request, and its SHA-256: the
// first certificate (the leaf) of chain, which must certify the request's
// own public key. The chain is written by the request's signer, not by its
// requester (an external signer with "sign" on its signer name; for host
// requests, whoever may sign in the host cluster): a signer that put there
// the certificate of another key (another signer's, a control-plane
// component's) would otherwise have an operator who may revoke both revoke
// that certificate in the name of this request (confused deputy).
func issuedTo(what string, requestKey func() (crypto.PublicKey, error), chain []byte) (*x509.Certificate, string, error) {
	if len(chain) == 0 {
		return nil, "", fmt.Errorf("%s has no certificate: nothing to revoke (it was not issued, or not yet)", what)
	}
	certs, err := strictpem.Certificates(chain, 16)
	if err != nil {
		return nil, "", fmt.Errorf("%s: the certificate does not parse: %w", what, err)
	}
	leaf := certs[0]
	key, err := requestKey()
	if err != nil {
		return nil, "", fmt.Errorf("%s: cannot read the public key of its request, so cannot tell that its certificate is the one issued for it: %w", what, err)
	}
	if !signing.PublicKeysEqual(key, leaf.PublicKey) {
		return nil, "", fmt.Errorf("%s: refusing to revoke its certificate (subject %q, serial %s): it is not for the request's public key, "+
			"so it was not issued for this request (its signer put another key's certificate in its status); revoke a certificate you have checked with --sha256",
			what, leaf.Subject.String(), printers.SerialHex(leaf.SerialNumber))
	}
	sum := sha256.Sum256(leaf.Raw)
	return leaf, hex.EncodeToString(sum[:]), nil
}

// requestKeyPEM reads the public key of a PEM PKCS#10 request
// (spec.request), whose first block is the request (a rekey request may
// be followed by TPM attestation blocks). The server checked the
// request's signature at create.
func requestKeyPEM(request []byte) func() (crypto.PublicKey, error) {
	return func() (crypto.PublicKey, error) {
		blocks, err := strictpem.Decode(request, 3)
		if err != nil {
			return nil, fmt.Errorf("spec.request: %w", err)
		}
		if len(blocks) == 0 || blocks[0].Type != "CERTIFICATE REQUEST" {
			return nil, errors.New(`spec.request: the first PEM block is not a "CERTIFICATE REQUEST"`)
		}
		return requestKeyDER("spec.request", blocks[0].Bytes)()
	}
}

// requestKeyDER reads the public key of a DER PKCS#10 request (a
// PodCertificateRequest's spec.stubPKCS10Request).
func requestKeyDER(field string, der []byte) func() (crypto.PublicKey, error) {
	return func() (crypto.PublicKey, error) {
		csr, err := x509.ParseCertificateRequest(der)
		if err != nil {
			return nil, fmt.Errorf("%s: the PKCS#10 request does not parse: %w", field, err)
		}
		if csr.PublicKey == nil {
			return nil, fmt.Errorf("%s: the key type of the PKCS#10 request is not supported", field)
		}
		return csr.PublicKey, nil
	}
}

// normalizeHex lowercases hex without colons (as openssl prints it) and
// checks it: size bytes when size is not 0.
// normalizeSerial is normalizeHex for --serial, which also takes an odd
// number of digits: a serial printed without its leading zero (as
// big.Int.Text(16) and older rekey versions print it) names the same
// certificate.
func normalizeSerial(s string) (string, error) {
	h := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), ":", ""))
	if len(h)%2 == 1 {
		h = "0" + h
	}
	if _, err := normalizeHex("--serial", h, 0); err != nil {
		return "", fmt.Errorf("--serial %q is not hex", s)
	}
	return h, nil
}

func normalizeHex(flag, s string, size int) (string, error) {
	h := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), ":", ""))
	b, err := hex.DecodeString(h)
	if err != nil || len(b) == 0 {
		return "", fmt.Errorf("%s %q is not hex", flag, s)
	}
	if size > 0 && len(b) != size {
		return "", fmt.Errorf("%s %q has %d bytes, not %d", flag, s, len(b), size)
	}
	return h, nil
}

// revoke creates the Revocation; one that exists already (the name is the
// certificate's SHA-256) means the certificate is revoked: success.
func (o *revokeOptions) revoke(ctx context.Context, client clientset.Interface, t target) error {
	revocations := client.CertificatesV1alpha1().Revocations()
	rev := &certv1alpha1.Revocation{
		// The server sets the name from the certificate it finds; named
		// here when known, so that the object is the certificate's.
		ObjectMeta: metav1.ObjectMeta{Name: t.spec.CertificateSHA256},
		Spec:       t.spec,
	}
	created, err := revocations.Create(ctx, rev, metav1.CreateOptions{FieldManager: "kubectl-rekey"})
	if apierrors.IsAlreadyExists(err) {
		name := rev.Name
		if name == "" {
			name = alreadyExistsName(err)
		}
		detail := ""
		if name != "" {
			// Best effort: the user may create but not read revocations.
			if existing, getErr := revocations.Get(ctx, name, metav1.GetOptions{}); getErr == nil {
				detail = fmt.Sprintf(" (%s, at %s by %s)", existing.Spec.Reason, existing.Status.RevocationTime.UTC().Format("2006-01-02T15:04:05Z"), existing.Status.RevokedBy)
			}
		}
		o.print(name, t.what, "already revoked"+detail+certificateDetail(t))
		return nil
	}
	if err != nil {
		return fmt.Errorf("cannot revoke %s: %s", t.what, statusMessage(err))
	}
	reason := created.Spec.Reason
	if reason == "" {
		reason = t.spec.Reason
	}
	o.print(created.Name, t.what, fmt.Sprintf("revoked (%s)", reason)+certificateDetail(t))
	return nil
}

// certificateDetail says which certificate a request named: what the
// operator can check against what they meant to revoke.
func certificateDetail(t target) string {
	if t.cert == nil {
		return ""
	}
	return fmt.Sprintf(": subject %q, serial %s, issued for %s", t.cert.Subject.String(), printers.SerialHex(t.cert.SerialNumber), t.what)
}

func (o *revokeOptions) print(name, what, outcome string) {
	if o.output == "name" {
		if name != "" {
			fmt.Fprintln(o.streams.Out, revocationResource+name)
		}
		return
	}
	if name == "" {
		fmt.Fprintf(o.streams.Out, "%s %s\n", what, outcome)
		return
	}
	fmt.Fprintf(o.streams.Out, "%s%s %s\n", revocationResource, name, outcome)
}

// alreadyExistsName is the object name an AlreadyExists error names.
func alreadyExistsName(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil {
		return status.Status().Details.Name
	}
	return ""
}

// issuedRequestNames completes NAME: the rekey requests that have a
// certificate.
func (o *revokeOptions) issuedRequestNames(ctx context.Context, prefix string) []string {
	client, err := o.newClient()
	if err != nil {
		return nil
	}
	list, err := client.CertificatesV1alpha1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var names []string
	for _, csr := range list.Items {
		if len(csr.Status.Certificate) > 0 && strings.HasPrefix(csr.Name, prefix) {
			names = append(names, csr.Name)
		}
	}
	return names
}

// maxCertFile bounds what --cert reads: a certificate chain is a few
// kilobytes.
const maxCertFile = 1 << 20

// certFileTarget names the first certificate of a PEM file by its SHA-256.
func certFileTarget(file string) target {
	t := target{what: "certificate in " + file}
	f, err := os.Open(file)
	if err != nil {
		t.err = fmt.Errorf("--cert: %w", err)
		return t
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxCertFile+1))
	if err != nil {
		t.err = fmt.Errorf("--cert %s: %w", file, err)
		return t
	}
	if len(data) > maxCertFile {
		t.err = fmt.Errorf("--cert %s: larger than %d bytes", file, maxCertFile)
		return t
	}
	certs, err := strictpem.Certificates(data, 16)
	if err != nil {
		t.err = fmt.Errorf("--cert %s: %w", file, err)
		return t
	}
	sum := sha256.Sum256(certs[0].Raw)
	t.cert = certs[0]
	t.spec.CertificateSHA256 = hex.EncodeToString(sum[:])
	return t
}
