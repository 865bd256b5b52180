// Package agent is rekey-agent's command line: the flags of `run`, wired
// into pkg/agent's managers and run loop, `exec-credential`, which
// hands the current client certificate to client-go (the kubelet's
// kubeconfig can name rekey-agent as its exec credential plugin),
// `trust-sync`, which keeps a trust consumer's CA file (pkg/trustsync), and
// `jwt-signer`, kube-apiserver's external service-account token signer
// (pkg/jwtsigner).
package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/agent"
	"rekey.io/rekey/pkg/agent/tpmnode"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/jwtsigner"
	"rekey.io/rekey/pkg/trustsync"
	"rekey.io/rekey/pkg/version"
)

// Default signers of node client and serving certificates.
const (
	DefaultSignerName        = "rekey.io/kube-apiserver-client-kubelet"
	DefaultServingSignerName = "rekey.io/kubelet-serving"
)

// RunOptions are `rekey-agent run`'s flags, named as the kubelet names them.
type RunOptions struct {
	BootstrapKubeconfig string
	Kubeconfig          string
	CertDir             string
	NodeName            string
	SignerName          string
	ExpirationSeconds   int32
	WaitTimeout         time.Duration
	Once                bool

	// Serving also keeps a serving certificate (rekey-server-*.pem) for the
	// node's DNS names and IPs, asked for with the client certificate.
	Serving           bool
	ServingSignerName string
	NodeIPs           []net.IP
	NodeDNSNames      []string

	// MetricsBindAddress serves /metrics when set.
	MetricsBindAddress string
	// RenewBefore renews no later than this long before expiry.
	RenewBefore time.Duration
	// TrustBundleFile is the CA's published bundle as a file; a newer CA
	// than the certificate's issuer first in it (the CA signs with it)
	// renews the certificate (for agents that may not read their
	// CertificateAuthority; see agent.TrustBundleRotating).
	TrustBundleFile string
	// IssuerCheckInterval is how often the issuing CA is looked at for a
	// rotation (0: never; the deadline alone decides).
	IssuerCheckInterval time.Duration
	// RevocationCheckInterval is how often the client certificate is
	// checked for a revocation (0: only when a renewal is refused for it).
	RevocationCheckInterval time.Duration
	// TPM attests every request with this TPM (a device path or
	// tcp://HOST:PORT), under AttestationPolicy.
	TPM               string
	AttestationPolicy string
	// TPMEK is the EK to attest with: rsa or ecc.
	TPMEK string
}

// Signers in Attestation approval mode, the defaults with --tpm.
const (
	DefaultTPMSignerName        = "rekey.io/kube-apiserver-client-kubelet-tpm"
	DefaultTPMServingSignerName = "rekey.io/kubelet-serving-tpm"
)

// NewCommand returns the rekey-agent command.
func NewCommand(out io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:          "rekey-agent",
		Short:        "Bootstrap and renew a node's certificates through certificates.rekey.io",
		SilenceUsage: true,
		// --version prints the release and the commit (package version).
		Version: version.Get().String(),
	}
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	root.AddCommand(newRunCommand(), newExecCredentialCommand(out), newTrustSyncCommand(), newJWTSignerCommand())
	return root
}

func newRunCommand() *cobra.Command {
	o := &RunOptions{SignerName: DefaultSignerName, ServingSignerName: DefaultServingSignerName, WaitTimeout: 15 * time.Minute, IssuerCheckInterval: time.Minute, RevocationCheckInterval: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Keep a current client certificate in --cert-dir: bootstrap it, then renew it at 70-90% of its lifetime",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.TPM != "" {
				if !cmd.Flags().Changed("signer-name") {
					o.SignerName = DefaultTPMSignerName
				}
				if !cmd.Flags().Changed("serving-signer-name") {
					o.ServingSignerName = DefaultTPMServingSignerName
				}
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.BootstrapKubeconfig, "bootstrap-kubeconfig", "", "kubeconfig with the credentials that may request the first certificate (a bootstrap token or certificate); its server and CA are used throughout")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "where to write the node's kubeconfig once it has a certificate (pointing at the current pair file)")
	fs.StringVar(&o.CertDir, "cert-dir", "", "directory of the certificate and key files")
	fs.StringVar(&o.NodeName, "node-name", "", "the node's name: the certificate is for system:node:<name>")
	fs.StringVar(&o.SignerName, "signer-name", o.SignerName, "the signer to ask")
	fs.Int32Var(&o.ExpirationSeconds, "expiration-seconds", 0, "lifetime to ask for (0: the signer's default)")
	fs.DurationVar(&o.WaitTimeout, "wait-timeout", o.WaitTimeout, "how long to wait for one request to be decided before asking again")
	fs.BoolVar(&o.Once, "once", false, "bootstrap or renew if due, then exit: 0 with a current certificate in place, non-zero otherwise")
	fs.BoolVar(&o.Serving, "serving", false, "also keep a serving certificate for --node-ip and --node-dns (rekey-server-*.pem)")
	fs.StringVar(&o.ServingSignerName, "serving-signer-name", o.ServingSignerName, "the signer of the serving certificate")
	fs.IPSliceVar(&o.NodeIPs, "node-ip", nil, "an IP address of the node, for the serving certificate (repeatable)")
	fs.StringSliceVar(&o.NodeDNSNames, "node-dns", nil, "a DNS name of the node, for the serving certificate (repeatable)")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", "", "serve /metrics here (host:port); empty: no metrics endpoint")
	fs.StringVar(&o.TrustBundleFile, "trust-bundle-file", "", "a trust bundle of the client certificate's CA as rekey publishes it (a published ConfigMap's ca.crt, mounted), for an agent that may not read its CA: when it puts a newer CA than the certificate's issuer first, or none issued the certificate, the certificate is renewed (inside the default renewal window from the file's change)")
	fs.DurationVar(&o.RenewBefore, "renew-before", 0, "renew no later than this long before the certificate expires (0: at the jittered 70-90% point of its lifetime only)")
	fs.StringVar(&o.TPM, "tpm", "", "attest every request with this TPM: a device (/dev/tpmrm0) or tcp://HOST:PORT (swtpm's command port). The signers then default to "+DefaultTPMSignerName+" and "+DefaultTPMServingSignerName+"; the attestation key is kept in --cert-dir")
	fs.StringVar(&o.TPMEK, "tpm-ek", string(tpmnode.EKRSA), "with --tpm: the EK to attest with, rsa (certificate at NV 0x01c00002) or ecc (0x01c0000a)")
	fs.StringVar(&o.AttestationPolicy, "attestation-policy", "", "with --tpm: the AttestationPolicy to attest under (required with --tpm)")
	fs.DurationVar(&o.IssuerCheckInterval, "issuer-check-interval", o.IssuerCheckInterval, "how often to look whether the issuing CertificateAuthority is rotating (renewing, from Prepared, at a point inside its renewal window); 0: only at the deadline. Needs get on signers and certificateauthorities; without it the deadline alone decides")
	fs.DurationVar(&o.RevocationCheckInterval, "revocation-check-interval", o.RevocationCheckInterval, "how often to check, with one SelfSubjectReview made with the client certificate, whether the server refuses it as revoked (403 \"... was revoked\" from rekey's authorization webhook); a revoked certificate is discarded and a new one bootstrapped at once with a new key and the bootstrap credentials. 0: only when a renewal is refused for it")
	return cmd
}

// Validate reports the first missing flag.
func (o *RunOptions) Validate() error {
	for flag, v := range map[string]string{"--bootstrap-kubeconfig": o.BootstrapKubeconfig, "--cert-dir": o.CertDir, "--node-name": o.NodeName, "--signer-name": o.SignerName} {
		if v == "" {
			return fmt.Errorf("%s is required", flag)
		}
	}
	if o.ExpirationSeconds != 0 && o.ExpirationSeconds < 600 {
		return errors.New("--expiration-seconds must be 0 or at least 600")
	}
	if o.RenewBefore < 0 {
		return errors.New("--renew-before must not be negative")
	}
	if o.RevocationCheckInterval < 0 || o.RevocationCheckInterval > 0 && o.RevocationCheckInterval < time.Second {
		return errors.New("--revocation-check-interval must be 0 or at least 1s")
	}
	if (o.TPM == "") != (o.AttestationPolicy == "") {
		return errors.New("--tpm and --attestation-policy go together")
	}
	if o.TPM != "" && o.TPMEK != string(tpmnode.EKRSA) && o.TPMEK != string(tpmnode.EKECC) {
		return fmt.Errorf("--tpm-ek %q is not rsa or ecc", o.TPMEK)
	}
	if o.Serving && len(o.NodeIPs)+len(o.NodeDNSNames) == 0 {
		return errors.New("--serving needs at least one --node-ip or --node-dns")
	}
	if !o.Serving && len(o.NodeIPs)+len(o.NodeDNSNames) > 0 {
		return errors.New("--node-ip and --node-dns are for --serving")
	}
	return nil
}

// Run builds the certificate managers the flags describe and runs them
// (agent.Run).
func (o *RunOptions) Run(ctx context.Context) error {
	// Before anything is asked or written: a directory others may write
	// would let them plant links where the key is written.
	created, err := agent.PrepareDir(o.CertDir)
	if err != nil {
		return fmt.Errorf("--cert-dir: %w", err)
	}
	if created {
		klog.FromContext(ctx).Info("Created the certificate directory, mode 0700", "certDir", o.CertDir)
	}
	bootstrap, err := clientcmd.LoadFromFile(o.BootstrapKubeconfig)
	if err != nil {
		return fmt.Errorf("--bootstrap-kubeconfig: %w", err)
	}
	if err := clientcmd.ResolveLocalPaths(bootstrap); err != nil {
		return fmt.Errorf("--bootstrap-kubeconfig: %w", err)
	}
	clientStore := &agent.Store{Dir: o.CertDir, Prefix: agent.PrefixClient}
	managers := []*agent.Manager{{
		Store:       clientStore,
		Template:    agent.ClientTemplate(o.SignerName, o.NodeName),
		NewClient:   clientFor(bootstrap),
		WaitTimeout: o.WaitTimeout,
	}}
	if o.Serving {
		managers = append(managers, &agent.Manager{
			Store:    &agent.Store{Dir: o.CertDir, Prefix: agent.PrefixServer},
			Template: agent.ServingTemplate(o.ServingSignerName, o.NodeName, o.NodeDNSNames, o.NodeIPs),
			// A serving certificate is asked for as the node, with the
			// client certificate.
			NewClient: func(*tls.Certificate) (clientset.Interface, error) {
				current, err := clientStore.Current()
				if err != nil {
					return nil, fmt.Errorf("the serving certificate is asked for with the client certificate: %w", err)
				}
				return clientFor(bootstrap)(current)
			},
			WaitTimeout: o.WaitTimeout,
		})
	}
	for _, m := range managers {
		if o.TPM != "" {
			tpm := o.TPM
			m.Attestor = &agent.TPMAttestor{Open: func() (*tpmnode.Device, error) { return tpmnode.Open(tpm) }, Node: o.NodeName, Policy: o.AttestationPolicy, Dir: o.CertDir, EK: tpmnode.EKType(o.TPMEK)}
		}
		if o.ExpirationSeconds > 0 {
			m.ExpirationSeconds = &o.ExpirationSeconds
		}
		m.RenewBefore = o.RenewBefore
		if o.IssuerCheckInterval > 0 {
			signerName := m.Template.SignerName
			bundle := ""
			if m.Store.Prefix == agent.PrefixClient {
				bundle = o.TrustBundleFile
			}
			m.CheckIssuer = func(ctx context.Context, client clientset.Interface, leaf *x509.Certificate) (*agent.EarlyRenewal, error) {
				early, known, err := agent.IssuerRotating(ctx, client, signerName, leaf)
				// The CA itself, when readable, decides: the bundle cannot
				// tell a rotation's renewal window.
				if err != nil || known || bundle == "" {
					return early, err
				}
				return agent.TrustBundleRotating(bundle, leaf)
			}
		}
	}
	agent.RegisterMetrics()
	if o.MetricsBindAddress != "" {
		if err := serveMetrics(ctx, o.MetricsBindAddress); err != nil {
			return err
		}
	}
	return agent.Run(ctx, agent.Config{Managers: managers, Kubeconfig: o.Kubeconfig, Bootstrap: bootstrap, IssuerCheckInterval: o.IssuerCheckInterval, RevocationCheckInterval: o.RevocationCheckInterval, Once: o.Once})
}

// serveMetrics serves /metrics until ctx is done.
func serveMetrics(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-bind-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", legacyregistry.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return nil
}

// clientFor builds clients with the bootstrap kubeconfig's server and CA:
// with the current pair when there is one, else with the bootstrap
// credentials.
func clientFor(bootstrap *clientcmdapi.Config) func(*tls.Certificate) (clientset.Interface, error) {
	return func(current *tls.Certificate) (clientset.Interface, error) {
		cfg, err := clientcmd.NewDefaultClientConfig(*bootstrap, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("--bootstrap-kubeconfig: %w", err)
		}
		if current != nil {
			certPEM, keyPEM, err := agent.EncodePair(current)
			if err != nil {
				return nil, err
			}
			cfg = rest.AnonymousClientConfig(cfg)
			cfg.CertData, cfg.KeyData = certPEM, keyPEM
		}
		return clientset.NewForConfig(cfg)
	}
}

func newExecCredentialCommand(out io.Writer) *cobra.Command {
	var certDir string
	var renewBefore, recheck time.Duration
	cmd := &cobra.Command{
		Use:   "exec-credential",
		Short: "Print the current client certificate as a client.authentication.k8s.io/v1 ExecCredential",
		Long: `Print the node's current client certificate and key (from --cert-dir, where
rekey-agent run keeps them) as a client.authentication.k8s.io/v1
ExecCredential, for a kubeconfig (the kubelet's) whose user runs
rekey-agent exec-credential as its exec credential plugin. The credential
expires at the renewal deadline (--renew-before) or after --recheck,
whichever comes first, and client-go then asks again.`,
		Example: `  users:
  - name: kubelet
    user:
      exec:
        apiVersion: client.authentication.k8s.io/v1
        command: /usr/local/bin/rekey-agent
        args: [exec-credential, --cert-dir=/var/lib/rekey]
        interactiveMode: Never`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if certDir == "" {
				return errors.New("--cert-dir is required")
			}
			store := &agent.Store{Dir: certDir, Prefix: agent.PrefixClient}
			// A pair `run` found revoked is gone from the store (never
			// handed out again): this fails until the new one is in.
			pair, err := store.Current()
			if err != nil {
				return fmt.Errorf("no usable client certificate (is `rekey-agent run` running? it may be bootstrapping a new one after a revocation): %w", err)
			}
			if recheck < 0 {
				return errors.New("--recheck must not be negative")
			}
			data, err := agent.ExecCredential(pair, time.Now(), renewBefore, store.EarlyRenewal(pair.Leaf), recheck)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(out, string(data))
			return err
		},
	}
	cmd.Flags().StringVar(&certDir, "cert-dir", "", "directory rekey-agent run keeps the certificate in")
	cmd.Flags().DurationVar(&renewBefore, "renew-before", 0, "the --renew-before of rekey-agent run, so that the expiration given to client-go is the renewal deadline")
	cmd.Flags().DurationVar(&recheck, "recheck", time.Minute, "expire the credential no later than this from now, so that client-go (the kubelet) takes a certificate rekey-agent run renewed early, during a CA rotation, within this long (0: only at the renewal deadline)")
	return cmd
}

func newTrustSyncCommand() *cobra.Command {
	var kubeconfig string
	var o trustsync.Options
	cmd := &cobra.Command{
		Use:   "trust-sync",
		Short: "Keep a CA file (a --client-ca-file, say) holding CertificateAuthorities' trust bundles, and report what it holds as a TrustConsumer",
		Long: `trust-sync writes the union of the --ca CertificateAuthorities' trust bundles and the
--include certificates to --file (atomically, mode 0644, only when it changes), runs --exec
after a change, and reports to rekey, as TrustConsumer --consumer, which certificates of each
CA the file holds. A rotation of those CAs stays Preparing, the old CA signing, until the file
holds the new CA. Without --once it watches the CAs and keeps going, and checks the file every
--resync too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			// Empty --kubeconfig: in-cluster (a DaemonSet's service account).
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return fmt.Errorf("--kubeconfig: %w", err)
			}
			client, err := clientset.NewForConfig(cfg)
			if err != nil {
				return err
			}
			return trustsync.Run(cmd.Context(), client, o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the user that registers and reports for --consumer, its own (rekey:trust-consumer; on a node, the node's own credential with rekey:node-trust-consumer and --consumer node.<node name>); empty: in-cluster")
	fs.StringVar(&o.Consumer, "consumer", "", "the TrustConsumer's name (a DNS subdomain): created if missing, reported as")
	fs.StringVar(&o.File, "file", "", "the CA file to keep (what kube-apiserver's or the kubelet's --client-ca-file, or etcd's --trusted-ca-file, names)")
	fs.StringArrayVar(&o.CAs, "ca", nil, "a CertificateAuthority whose trust bundle the file holds (repeatable, at most 16)")
	fs.StringArrayVar(&o.Include, "include", nil, "a PEM file of fixed certificates written first (repeatable; the cluster's own CA, say)")
	fs.BoolVar(&o.Once, "once", false, "one pass (write, --exec, report), then exit: non-zero on any failure, and when a --ca does not exist or has no trust bundle yet (the others written)")
	fs.StringVar(&o.Exec, "exec", "", "a command run with sh -c after the file changed (within 2m); while it fails, the report waits and it is retried, also after a restart (a marker, --file + \""+trustsync.ExecPendingSuffix+"\", records it is owed)")
	fs.DurationVar(&o.Resync, "resync", 30*time.Second, "without --once, also check the file this often (jittered) and repair it when it was overwritten or deleted or an --include changed (0: only on CA changes)")
	return cmd
}

// hostname is os.Hostname (tests replace it).
var hostname = os.Hostname

// defaultTrustConsumer is jwt-signer's --trust-consumer default:
// kube-apiserver-jwt.<host name>, lowercased; an error when the host name
// is unknown, one that does not tell hosts apart (localhost), or one that
// does not make a TrustConsumer name (a DNS subdomain: no '_', no trailing
// '.', at most 253 bytes), which could never be registered, so that no
// rotation would wait for this kube-apiserver.
func defaultTrustConsumer() (string, error) {
	host, err := hostname()
	if err != nil {
		return "", fmt.Errorf("the host name is unknown: %w", err)
	}
	host = strings.ToLower(host)
	switch host {
	case "":
		return "", errors.New("the host name is empty")
	case "localhost", "localhost.localdomain":
		return "", fmt.Errorf("the host name %q does not tell hosts apart", host)
	}
	name := jwtsigner.ConsumerPrefix + host
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return "", fmt.Errorf("the host name %q gives %q, not a DNS subdomain (%s)", host, name, strings.Join(msgs, "; "))
	}
	return name, nil
}

func newJWTSignerCommand() *cobra.Command {
	var kubeconfig, socketMode, metricsAddr string
	var allowedUIDs []uint
	// An unknown default is an error unless the flag is given: an empty
	// one would silently mean "report nothing", and rotations would not
	// wait for this kube-apiserver.
	defaultConsumer, defaultConsumerErr := defaultTrustConsumer()
	o := jwtsigner.Options{
		Socket:        jwtsigner.DefaultSocket,
		CacheFile:     jwtsigner.DefaultCacheFile,
		TrustConsumer: defaultConsumer,
		RefreshHint:   jwtsigner.DefaultRefreshHint,
	}
	cmd := &cobra.Command{
		Use:   "jwt-signer --certificate-authority NAME",
		Short: "Serve kube-apiserver's external service-account token signer on a Unix socket, signing with a rekey CertificateAuthority",
		Long: `Serve kube-apiserver's external JWT signer API (--service-account-signing-endpoint)
on a Unix socket, with the keys of a CertificateAuthority whose spec.purpose is
ServiceAccountTokens.

Run one jwt-signer beside each kube-apiserver, on the same host, started before it
(a static pod or a systemd unit). kube-apiserver asks it for:

  * the public keys tokens are verified with (FetchKeys): the CA's current, next
    and previous keys, and its legacy public keys until their expireTime (kept out
    of /openid/v1/jwks). jwt-signer watches the CA and keeps these keys in
    --cache-file as well, so that it answers at kube-apiserver's start before any
    rekey-apiserver runs.
  * signatures (Sign): jwt-signer forwards the claims to the CA's signjwt
    subresource; the private key never leaves rekey. While rekey-apiserver cannot
    be reached, new tokens cannot be issued, and the tokens already issued keep
    working.

Each time kube-apiserver fetches the keys, jwt-signer reports which of the CA's
keys it got, as the TrustConsumer named by --trust-consumer (which jwt-signer
registers): a rotation of the CA signs with its new key only once every
kube-apiserver has fetched it.

The --kubeconfig user needs the rekey:jwt-signer ClusterRole and, to report, the
verb trust on the CA. Give each host its own user (a client certificate, for
example rekey:jwt-signer:<host>): whoever has it can have any service-account
token signed.`,
		Example: `  # Serve the CertificateAuthority service-account-tokens at the default socket:
  rekey-agent jwt-signer --kubeconfig /etc/rekey/jwt-signer.kubeconfig \
      --certificate-authority service-account-tokens

  # and start kube-apiserver with:
  kube-apiserver --service-account-signing-endpoint /run/rekey/jwt-signer.sock \
      --service-account-issuer https://kubernetes.default.svc ...`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			mode, err := strconv.ParseUint(socketMode, 8, 32)
			if err != nil || mode > 0o777 {
				return fmt.Errorf("--socket-mode %q is not an octal file mode such as 0600", socketMode)
			}
			o.SocketMode = os.FileMode(mode)
			if defaultConsumerErr != nil && !cmd.Flags().Changed("trust-consumer") {
				return fmt.Errorf("--trust-consumer: the default, %s<host name>, cannot be made: %w; name this host's TrustConsumer with --trust-consumer, or pass --trust-consumer=\"\" to report nothing (rotations of the CA then do not wait for this kube-apiserver)", jwtsigner.ConsumerPrefix, defaultConsumerErr)
			}
			o.AllowedUIDs = nil
			for _, uid := range allowedUIDs {
				if uid > math.MaxUint32 {
					return fmt.Errorf("--allowed-uids: %d is not a uid", uid)
				}
				o.AllowedUIDs = append(o.AllowedUIDs, uint32(uid))
			}
			if err := o.Validate(); err != nil {
				return err
			}
			// Empty --kubeconfig: in-cluster.
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return fmt.Errorf("--kubeconfig: %w", err)
			}
			cfg = rest.CopyConfig(cfg)
			rest.AddUserAgent(cfg, "rekey-agent-jwt-signer")
			// One signjwt call per token kube-apiserver issues: the
			// server's priority and fairness limits them, not a client
			// bucket of 5 a second.
			cfg.QPS = -1
			client, err := clientset.NewForConfig(cfg)
			if err != nil {
				return err
			}
			signer, err := jwtsigner.New(client, o)
			if err != nil {
				return err
			}
			jwtsigner.RegisterMetrics()
			if metricsAddr != "" {
				if err := serveMetrics(cmd.Context(), metricsAddr); err != nil {
					return err
				}
			}
			return signer.Run(cmd.Context())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the host's signer user (with the rekey:jwt-signer ClusterRole); empty: in-cluster")
	fs.StringVar(&o.CertificateAuthority, "certificate-authority", "", "the CertificateAuthority (spec.purpose ServiceAccountTokens) whose keys are served and sign (required)")
	fs.StringVar(&o.Socket, "socket", o.Socket, "the Unix socket to serve, which kube-apiserver's --service-account-signing-endpoint names: a path, or @name for an abstract socket (with --allow-abstract-socket)")
	fs.BoolVar(&o.AllowAbstractSocket, "allow-abstract-socket", false, "allow an abstract --socket (@name): it has no file mode, so any process in the host's network namespace, a hostNetwork pod's too, may connect; only --allowed-uids then keeps others out")
	fs.StringVar(&socketMode, "socket-mode", "0600", "the socket file's mode, in octal (0600: only the signer's user, which kube-apiserver must then run as); not used for an abstract socket. A mode that lets group or others connect is logged as a warning")
	fs.UintSliceVar(&allowedUIDs, "allowed-uids", nil, "the uids whose processes are served (the kernel's SO_PEERCRED of each connection, comma-separated); any other caller is refused PermissionDenied. Empty: the signer's own uid and 0")
	fs.StringVar(&o.CacheFile, "cache-file", o.CacheFile, "where the public keys served are kept (JSON, mode 0644), so that they are served at the next start before rekey-apiserver can be reached")
	fs.StringVar(&o.TrustConsumer, "trust-consumer", o.TrustConsumer, "the TrustConsumer that jwt-signer registers and reports the keys kube-apiserver fetched as (kube-apiserver-jwt.<host name> by default; without a host name that tells hosts apart and makes a DNS subdomain, jwt-signer does not start unless this is given); --trust-consumer=\"\": report nothing, and rotations of the CA do not wait for this kube-apiserver")
	fs.DurationVar(&o.RefreshHint, "refresh-hint", o.RefreshHint, "how often kube-apiserver is told to fetch the keys again (whole seconds); a rotation's new key reaches it within this long")
	fs.StringVar(&metricsAddr, "metrics-bind-address", "", "serve /metrics here (host:port); empty: no metrics endpoint")
	return cmd
}
