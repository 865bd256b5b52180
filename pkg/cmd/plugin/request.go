package plugin

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/csrwait"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/pkg/registry/printers"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/strictpem"
)

// requestDeps are what request and renew reach the server and the
// kubeconfig through; tests replace them.
type requestDeps struct {
	newClient func() (clientset.Interface, error)
	// newWarningClient is a client whose responses' warnings are added
	// to warnings: a dry run's decision comes back as warnings.
	newWarningClient func(warnings *warningList) (clientset.Interface, error)
	// restConfig is the connection the flags and kubeconfig give (the
	// current context, or --context, --server...), for --kubeconfig-out.
	restConfig func() (*rest.Config, error)
	// whoAmI is the user the server authenticates these requests as (a
	// SelfSubjectReview, which a standalone server answers too): a
	// request is resumed only if this user created it.
	whoAmI func(ctx context.Context) (string, error)
	// servesCoreAPI reports whether the server serves Kubernetes' core
	// API (v1): a standalone rekey-apiserver does not, and refuses the
	// kubeconfig --kubeconfig-out writes. nil: unknown.
	servesCoreAPI func(ctx context.Context) (bool, error)
}

func newRequestDeps(configFlags *genericclioptions.ConfigFlags, newClient func() (clientset.Interface, error)) requestDeps {
	return requestDeps{
		newClient: newClient,
		newWarningClient: func(warnings *warningList) (clientset.Interface, error) {
			cfg, err := configFlags.ToRESTConfig()
			if err != nil {
				return nil, err
			}
			cfg = rest.CopyConfig(cfg)
			cfg.WarningHandler = warnings
			return clientset.NewForConfig(cfg)
		},
		restConfig: configFlags.ToRESTConfig,
		whoAmI: func(ctx context.Context) (string, error) {
			cfg, err := configFlags.ToRESTConfig()
			if err != nil {
				return "", err
			}
			kube, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return "", err
			}
			review, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				return "", errors.New(statusMessage(err))
			}
			return review.Status.UserInfo.Username, nil
		},
		servesCoreAPI: func(ctx context.Context) (bool, error) {
			cfg, err := configFlags.ToRESTConfig()
			if err != nil {
				return false, err
			}
			kube, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return false, err
			}
			_, err = kube.Discovery().ServerResourcesForGroupVersion("v1")
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil, err
		},
	}
}

// warningList collects the warnings of responses (a rest.WarningHandler).
type warningList struct {
	mu    sync.Mutex
	texts []string
}

func (w *warningList) HandleWarningHeader(code int, _ string, text string) {
	if code != 299 || text == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.texts = append(w.texts, text)
}

func (w *warningList) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.texts...)
}

// defaultWait is how long --wait (without a value), --out and
// --kubeconfig-out wait for the certificate.
const defaultWait = 5 * time.Minute

// fetchOptions are the flags request and renew share: what happens once
// the request exists.
type fetchOptions struct {
	approve       bool
	wait          string
	out           string
	kubeconfigOut string
}

func (f *fetchOptions) addFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.BoolVar(&f.approve, "approve", false, "approve the request as \"kubectl rekey approve\" does (needs verb approve on the signer)")
	fs.StringVar(&f.wait, "wait", "", "wait for the certificate, at most this long (--wait alone: "+defaultWait.String()+"); --out and --kubeconfig-out wait too")
	fs.Lookup("wait").NoOptDefVal = defaultWait.String()
	fs.StringVar(&f.out, "out", "", "write the certificate (PEM, the chain as issued) to this file; default: standard output")
	fs.StringVar(&f.kubeconfigOut, "kubeconfig-out", "", "also write a kubeconfig (mode 0600) that authenticates with the key and certificate to the current context's server")
}

// waitFor is how long to wait for the certificate: 0 not at all.
func (f *fetchOptions) waitFor() (time.Duration, error) {
	if f.wait == "" {
		if f.out != "" || f.kubeconfigOut != "" {
			return defaultWait, nil
		}
		return 0, nil
	}
	d, err := time.ParseDuration(f.wait)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("--wait %q is not a positive duration (such as 2m)", f.wait)
	}
	return d, nil
}

// check refuses, before anything is created, what would fail at the end,
// and an --out that would overwrite one of keyFiles (the key files given).
func (f *fetchOptions) check(key crypto.Signer, keyFiles ...string) error {
	if _, err := f.waitFor(); err != nil {
		return err
	}
	for _, k := range keyFiles {
		if k != "" && f.out != "" && sameFile(k, f.out) {
			return fmt.Errorf("--out %s is the key file: the certificate would overwrite the private key", f.out)
		}
	}
	if f.kubeconfigOut == "" {
		return nil
	}
	if key == nil {
		return errors.New("--kubeconfig-out needs the private key: give --key (or --new-key) with --csr")
	}
	if _, err := os.Lstat(f.kubeconfigOut); err == nil {
		return fmt.Errorf("--kubeconfig-out %s exists; refusing to overwrite a kubeconfig: remove it or choose another file", f.kubeconfigOut)
	}
	return nil
}

// sameFile: paths a and b name the same file, by another spelling of the
// path, a symlink or a hard link. (The write of --out replaces a symlink
// rather than writing through it, so a dangling one that points at a key
// made later cannot overwrite it either.)
func sameFile(a, b string) bool {
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	if errA == nil && errB == nil && absA == absB {
		return true
	}
	infoA, errA := os.Stat(a)
	infoB, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(infoA, infoB)
}

type requestOptions struct {
	templateFlags
	fetchOptions
	dryRun bool

	deps    requestDeps
	streams genericiooptions.IOStreams
}

// newRequestCommand is `kubectl rekey request NAME --signer S (--key FILE
// | --new-key FILE | --csr FILE) ...`.
func newRequestCommand(deps requestDeps, streams genericiooptions.IOStreams) *cobra.Command {
	o := &requestOptions{deps: deps, streams: streams}
	cmd := &cobra.Command{
		Use:   "request NAME --signer SIGNER (--new-key FILE | --key FILE | --csr FILE) [--cn CN] [--org O]... [--dns NAME]... [--ip IP]... [--usages U,...] [--duration D] [--approve] [--wait[=TIMEOUT]] [--out FILE] [--kubeconfig-out FILE] [--dry-run]",
		Short: "Request a certificate: make the key and the CSR, create the request, optionally approve it, wait and write the certificate",
		Long: `Request a certificate from a rekey signer in one command.

The PKCS#10 request is made from the key and the subject flags:
  --new-key FILE   makes a new private key (--key-type, default ecdsa-p256)
                   and writes it to FILE with mode 0600; an existing FILE is
                   never overwritten (it is reused only to resume the same
                   request: NAME exists and is for that key)
  --key FILE       uses an existing private key (PEM: PKCS#8, EC or RSA)
  --csr FILE       uses a PEM PKCS#10 request as it is (no subject flags);
                   add --key FILE for --kubeconfig-out
The request is a certificates.rekey.io CertificateSigningRequest named NAME.
If NAME exists already, created by you for the same key, signer, usages
and lifetime, it is taken up where it is (a rerun after an interruption);
any other existing NAME is an error, and never approved.

--approve approves it as "kubectl rekey approve NAME" does (rekey signs
in the approval write when it can). --wait waits for the certificate;
--out FILE and --kubeconfig-out FILE wait as well. The certificate (the
chain as issued, PEM) goes to --out, or to standard output when neither
--out nor --kubeconfig-out is given (messages then go to standard error).
--kubeconfig-out writes a kubeconfig using the key and certificate against
the current context's server and CA.

A request that ends Denied or Failed prints the condition's reason and
message (the rule of the signer's policy it broke) and exits 1; so does a
wait that times out, saying what it was waiting for.

--dry-run creates nothing: the server runs the signer's policy on the
request, as you, and says what it would issue (subject, subject
alternative names, usages, lifetime, CA) or the rule it breaks (exit 1).
It is the server's own decision (a create with dryRun=All), so it uses
the real policy and your real user name; it does not approve, so an
approval rule (Manual: someone must approve; NodeClient: a
SubjectAccessReview) is only named. --new-key with --dry-run writes no key.`,
		Example: `  # A client certificate for kube-apiserver, approved and written with a kubeconfig:
  kubectl rekey request alice --signer rekey.io/kube-apiserver-client --new-key alice.key \
      --cn alice --org dev --approve --wait --out alice.crt --kubeconfig-out alice.kubeconfig

  # What would the signer issue for this template?
  kubectl rekey request web --signer example.com/serving --new-key web.key --cn web \
      --dns web.example.com --usages "digital signature,server auth" --duration 720h --dry-run

  # A CSR made elsewhere (openssl req -new -key app.key -subj /CN=app -out app.csr):
  kubectl rekey request app --signer example.com/apps --csr app.csr --wait=2m --out app.crt`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(contextOf(cmd), args[0])
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.signer, "signer", "", "the signer name (spec.signerName), such as rekey.io/kube-apiserver-client")
	fs.StringVar(&o.newKey, "new-key", "", "make a new private key and write it to this file (mode 0600)")
	fs.StringVar(&o.keyType, "key-type", "ecdsa-p256", "with --new-key: "+strings.Join(keyTypeNames(), ", "))
	fs.StringVar(&o.keyFile, "key", "", "an existing private key (PEM) to request the certificate for")
	fs.StringVar(&o.csrFile, "csr", "", "a PEM PKCS#10 request to send as it is")
	o.addTemplateFlags(cmd)
	o.fetchOptions.addFlags(cmd)
	fs.BoolVar(&o.dryRun, "dry-run", false, "create nothing: print what the signer's policy would issue, or the rule the request breaks")
	_ = cmd.MarkFlagRequired("signer")
	_ = cmd.RegisterFlagCompletionFunc("key-type", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return keyTypeNames(), cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// addTemplateFlags adds the flags that shape a new PKCS#10 request and
// the spec around it.
func (f *templateFlags) addTemplateFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.subject, "subject", "", `the subject, "CN=alice,O=dev,OU=team-a" or "/CN=alice/O=dev"`)
	fs.StringVar(&f.cn, "cn", "", "the subject common name (kube-apiserver reads it as the user name)")
	fs.StringArrayVar(&f.orgs, "org", nil, "a subject organization (kube-apiserver reads them as groups; repeatable)")
	fs.StringArrayVar(&f.dns, "dns", nil, "a DNS subject alternative name (repeatable)")
	fs.StringArrayVar(&f.ips, "ip", nil, "an IP subject alternative name (repeatable)")
	fs.StringArrayVar(&f.emails, "email", nil, "an email subject alternative name (repeatable)")
	fs.StringArrayVar(&f.uris, "uri", nil, "a URI subject alternative name (repeatable)")
	fs.StringSliceVar(&f.usages, "usages", []string{string(certv1alpha1.UsageDigitalSignature), string(certv1alpha1.UsageClientAuth)},
		`usages, comma-separated ("server auth" or server-auth)`)
	fs.DurationVar(&f.duration, "duration", 0, "the lifetime to ask for (spec.expirationSeconds, at least 10m); default: the signer's")
}

// keySource is the key and PKCS#10 request the flags give, and whether
// the key is new (to be written to --new-key).
type keySource struct {
	key     crypto.Signer // nil for --csr without --key
	request []byte        // PEM
	newKey  bool
}

func (o *requestOptions) keySource(ctx context.Context, client clientset.Interface, name string) (keySource, error) {
	sources := 0
	for _, s := range []string{o.newKey, o.keyFile, o.csrFile} {
		if s != "" {
			sources++
		}
	}
	switch {
	case o.newKey != "" && (o.keyFile != "" || o.csrFile != ""):
		return keySource{}, errors.New("--new-key makes the key: it goes with neither --key nor --csr")
	case sources == 0:
		return keySource{}, errors.New("give the key: --new-key FILE (made for you), --key FILE, or --csr FILE")
	}
	var ks keySource
	if o.csrFile != "" {
		if o.hasSubjectFlags() {
			return ks, errors.New("--csr is sent as it is: --subject, --cn, --org, --dns, --ip, --email and --uri cannot change it")
		}
		data, err := readSmallFile("--csr", o.csrFile)
		if err != nil {
			return ks, err
		}
		block, err := strictpem.DecodeOne(data, "CERTIFICATE REQUEST")
		if err != nil {
			return ks, fmt.Errorf("--csr %s: %w", o.csrFile, err)
		}
		req, err := requestKeyDER("--csr "+o.csrFile, block.Bytes)()
		if err != nil {
			return ks, err
		}
		ks.request = append([]byte(nil), data...)
		if o.keyFile != "" {
			if ks.key, err = o.readKey(o.keyFile); err != nil {
				return ks, err
			}
			if !sameKey(ks.request, ks.key) {
				return ks, fmt.Errorf("--csr %s is for a %s key that is not --key %s", o.csrFile, keyDescription(req), o.keyFile)
			}
		}
		return ks, nil
	}
	tmpl, err := o.certificateRequestTemplate()
	if err != nil {
		return ks, err
	}
	switch {
	case o.keyFile != "":
		if ks.key, err = o.readKey(o.keyFile); err != nil {
			return ks, err
		}
	case o.dryRun:
		// Nothing is written: the key only signs the request the policy
		// is run on.
		if ks.key, err = o.generateKey(); err != nil {
			return ks, err
		}
	default:
		if ks.key, ks.newKey, err = o.newOrResumedKey(ctx, client, name); err != nil {
			return ks, err
		}
	}
	ks.request, err = createRequestPEM(tmpl, ks.key)
	return ks, err
}

func (o *requestOptions) readKey(file string) (crypto.Signer, error) {
	data, err := readSmallFile("--key", file)
	if err != nil {
		return nil, err
	}
	return parsePrivateKeyPEM("--key", file, data)
}

func (o *requestOptions) generateKey() (crypto.Signer, error) {
	gen, ok := keyTypes[o.keyType]
	if !ok {
		return nil, fmt.Errorf("--key-type %q: one of %s", o.keyType, strings.Join(keyTypeNames(), ", "))
	}
	key, err := gen()
	if err != nil {
		return nil, fmt.Errorf("making a %s key: %w", o.keyType, err)
	}
	return key, nil
}

// newOrResumedKey makes the --new-key key, or, when the file exists,
// reads it only if request name exists already for it: the same command
// run again after an interruption. Any other existing file is refused:
// it may be the only copy of a key in use.
func (o *requestOptions) newOrResumedKey(ctx context.Context, client clientset.Interface, name string) (crypto.Signer, bool, error) {
	if _, err := os.Lstat(o.newKey); err != nil {
		if !os.IsNotExist(err) {
			return nil, false, fmt.Errorf("--new-key: %w", err)
		}
		key, err := o.generateKey()
		return key, true, err
	}
	refuse := fmt.Errorf("--new-key %s exists; refusing to overwrite a private key: use --key %s to request a certificate for it, or remove it", o.newKey, o.newKey)
	data, err := readSmallFile("--new-key", o.newKey)
	if err != nil {
		return nil, false, refuse
	}
	key, err := parsePrivateKeyPEM("--new-key", o.newKey, data)
	if err != nil {
		return nil, false, refuse
	}
	existing, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil || !sameKey(existing.Spec.Request, key) {
		return nil, false, refuse
	}
	return key, false, nil
}

func (o *requestOptions) run(ctx context.Context, name string) error {
	usages, err := parseUsages(o.usages)
	if err != nil {
		return err
	}
	seconds, err := expirationSeconds(o.duration)
	if err != nil {
		return err
	}
	if o.dryRun && (o.approve || o.wait != "" || o.out != "" || o.kubeconfigOut != "") {
		return errors.New("--dry-run creates nothing: it goes with none of --approve, --wait, --out, --kubeconfig-out")
	}
	client, err := o.deps.newClient()
	if err != nil {
		return err
	}
	ks, err := o.keySource(ctx, client, name)
	if err != nil {
		return err
	}
	if err := o.fetchOptions.check(ks.key, o.newKey, o.keyFile); err != nil {
		return err
	}
	csr := &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request: ks.request, SignerName: o.signer, ExpirationSeconds: seconds, Usages: usages,
		},
	}
	if o.dryRun {
		return dryRunRequest(ctx, o.deps, csr, o.streams)
	}
	if ks.newKey {
		// Before the request: a request never exists whose key was not
		// kept.
		if err := writeNewKey(o.newKey, ks.key); err != nil {
			return err
		}
	}
	created, resumed, err := createOrResume(ctx, client, csr, ks.key, o.deps.whoAmI)
	if err != nil {
		if ks.newKey {
			// Nothing asks for this key: leave no file behind, so that the
			// same command can be run again.
			_ = os.Remove(o.newKey)
		}
		return err
	}
	return o.fetchOptions.fetch(ctx, o.deps, client, created, resumed, ks.key, o.streams)
}

// createOrResume creates csr; one that exists already (a rerun) is taken
// up as it is (resumed) only if it is the one this command would have
// made: the same key (or request bytes), signer, usages and lifetime, and
// created by the same user. Anyone may create a request with a copy of
// Alice's PKCS#10 bytes (they are no secret) and usages or a lifetime of
// their choosing; resuming it, and --approve approving it, on the key
// alone would approve their spec.
func createOrResume(ctx context.Context, client clientset.Interface, csr *certv1alpha1.CertificateSigningRequest, key crypto.Signer, whoAmI func(context.Context) (string, error)) (_ *certv1alpha1.CertificateSigningRequest, resumed bool, _ error) {
	csrs := client.CertificatesV1alpha1().CertificateSigningRequests()
	created, err := csrs.Create(ctx, csr, metav1.CreateOptions{FieldManager: "kubectl-rekey"})
	if err == nil {
		return created, false, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, false, fmt.Errorf("cannot create certificatesigningrequest %q: %s", csr.Name, statusMessage(err))
	}
	existing, getErr := csrs.Get(ctx, csr.Name, metav1.GetOptions{})
	switch {
	case getErr != nil:
		return nil, false, fmt.Errorf("certificatesigningrequest %q exists already, and reading it failed: %s", csr.Name, statusMessage(getErr))
	case key == nil && string(existing.Spec.Request) != string(csr.Spec.Request),
		key != nil && !sameKey(existing.Spec.Request, key):
		return nil, false, fmt.Errorf("certificatesigningrequest %q exists already, for another key: choose another NAME, or renew it with \"kubectl rekey renew %s\"", csr.Name, csr.Name)
	case existing.Spec.SignerName != csr.Spec.SignerName:
		return nil, false, fmt.Errorf("certificatesigningrequest %q exists already, for signer %q, not %q: choose another NAME", csr.Name, existing.Spec.SignerName, csr.Spec.SignerName)
	case !sameUsages(existing.Spec.Usages, csr.Spec.Usages):
		return nil, false, fmt.Errorf("certificatesigningrequest %q exists already, with usages %q, not %q: choose another NAME", csr.Name, joinKeyUsages(existing.Spec.Usages), joinKeyUsages(csr.Spec.Usages))
	case !sameExpiration(existing.Spec.ExpirationSeconds, csr.Spec.ExpirationSeconds):
		return nil, false, fmt.Errorf("certificatesigningrequest %q exists already, asking for %s, not %s: choose another NAME", csr.Name, lifetime(existing.Spec.ExpirationSeconds), lifetime(csr.Spec.ExpirationSeconds))
	}
	me, err := whoAmI(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("certificatesigningrequest %q exists already, and who you are could not be read to check that you created it (a SelfSubjectReview): %w; choose another NAME", csr.Name, err)
	}
	if me == "" || existing.Spec.Username != me {
		return nil, false, fmt.Errorf("certificatesigningrequest %q exists already, created by user %q, not by you (%q): not taking it up; choose another NAME", csr.Name, existing.Spec.Username, me)
	}
	return existing, true, nil
}

// sameUsages: the same usages, in any order.
func sameUsages(a, b []certv1alpha1.KeyUsage) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func sameExpiration(a, b *int32) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// lifetime names spec.expirationSeconds for a message.
func lifetime(s *int32) string {
	if s == nil {
		return "the signer's default lifetime"
	}
	return (time.Duration(*s) * time.Second).String()
}

// fetch approves (if asked), waits (if asked) and writes what was
// issued. resumed: csr existed already (a rerun), it was not created now.
func (f *fetchOptions) fetch(ctx context.Context, deps requestDeps, client clientset.Interface, csr *certv1alpha1.CertificateSigningRequest, resumed bool, key crypto.Signer, streams genericiooptions.IOStreams) error {
	// The certificate goes to standard output unless a file is named;
	// messages then go to standard error, so that the output is PEM only.
	toStdout := f.out == "" && f.kubeconfigOut == ""
	msg := streams.Out
	if toStdout {
		msg = streams.ErrOut
	}
	what := "created"
	if resumed {
		what = "exists already for this key: taken up where it is"
	}
	fmt.Fprintf(msg, "certificatesigningrequest.certificates.rekey.io/%s %s\n", csr.Name, what)
	if _, _, err := csrwait.Decided(csr); err != nil {
		return decidedError(err)
	}
	if f.approve && certv1alpha1.IsPending(csr) {
		d := &decisionOptions{decision: decisionApprove, reason: decisionApprove.reason, newClient: deps.newClient, streams: genericiooptions.IOStreams{Out: msg, ErrOut: streams.ErrOut}}
		if err := d.decide(ctx, client, csr.Name); err != nil {
			return err
		}
	}
	timeout, err := f.waitFor()
	if err != nil {
		return err
	}
	var chain []byte
	if timeout > 0 {
		chain, err = waitForCertificate(ctx, client, csr, timeout)
		if err != nil {
			return err
		}
	} else {
		// Without --wait: the certificate if the create or the approval
		// issued it, else only how to get it later.
		current, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading certificatesigningrequest %q: %s", csr.Name, statusMessage(err))
		}
		done, issued, err := csrwait.Decided(current)
		if err != nil {
			return decidedError(err)
		}
		if !done {
			fmt.Fprintf(msg, "no certificate yet: %s; then \"kubectl rekey request %s ... --wait\" again, or: kubectl get rcsr %s -o jsonpath='{.status.certificate}' | base64 -d\n",
				pendingState(current), csr.Name, csr.Name)
			return nil
		}
		chain = issued
	}
	certs, err := validation.ParseCertificateChain(chain)
	if err != nil {
		return fmt.Errorf("certificatesigningrequest %q: the issued certificate does not parse: %w", csr.Name, err)
	}
	if key != nil && !signing.PublicKeysEqual(certs[0].PublicKey, key.Public()) {
		return fmt.Errorf("certificatesigningrequest %q: the certificate in its status is not for your key; not writing it", csr.Name)
	}
	fmt.Fprintf(msg, "issued: subject %q, serial %s, valid %s to %s, by %q\n", certs[0].Subject.String(), printers.SerialHex(certs[0].SerialNumber),
		certs[0].NotBefore.UTC().Format(time.RFC3339), certs[0].NotAfter.UTC().Format(time.RFC3339), certs[0].Issuer.String())
	switch {
	case f.out != "":
		// A new file renamed into place: an --out that is a symlink (to a
		// key, or to any file of the user's) is replaced, not written
		// through, and a reader never sees half a chain.
		if err := pki.WriteFileAtomic(f.out, chain, 0o644); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		fmt.Fprintf(msg, "certificate written to %s\n", f.out)
	case toStdout:
		if _, err := streams.Out.Write(chain); err != nil {
			return err
		}
	}
	if f.kubeconfigOut != "" {
		if err := writeKubeconfig(deps, f.kubeconfigOut, csr.Name, chain, key); err != nil {
			return err
		}
		fmt.Fprintf(msg, "kubeconfig written to %s\n", f.kubeconfigOut)
		if deps.servesCoreAPI != nil {
			// Best effort: an error leaves the note out.
			if core, err := deps.servesCoreAPI(ctx); err == nil && !core {
				fmt.Fprintf(streams.ErrOut, "note: this server serves no Kubernetes core API (a standalone rekey-apiserver): it authenticates only clients of its own PKI and will refuse %s (401); make a kubeconfig for it with \"rekey-apiserver standalone user-kubeconfig\" (docs/standalone.md)\n", f.kubeconfigOut)
			}
		}
	}
	return nil
}

// pendingState says why a request has no certificate yet.
func pendingState(csr *certv1alpha1.CertificateSigningRequest) string {
	if certv1alpha1.IsPending(csr) {
		// Not "or --approve": the requester is often not allowed to
		// approve (approve on signers/NAME), and the hint misled them.
		return fmt.Sprintf("it is waiting for someone allowed to approve for signer %q (kubectl rekey approve %s)", csr.Spec.SignerName, csr.Name)
	}
	return fmt.Sprintf("it is Approved but nothing has signed it yet (is there a Signer for %q, and is it Ready? kubectl get signers)", csr.Spec.SignerName)
}
