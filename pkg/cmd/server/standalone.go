package server

import (
	"fmt"
	"io"
	"net"
	"path/filepath"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authentication/group"
	authenticatorunion "k8s.io/apiserver/pkg/authentication/request/union"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	netutils "k8s.io/utils/net"

	rekeyadmission "rekey.io/rekey/pkg/admission"
	"rekey.io/rekey/pkg/apiserver"
	"rekey.io/rekey/pkg/standalone"
)

// StandaloneOptions run rekey without a cluster: embedded etcd, a PKI made
// on first start, and a fixed authorizer.
type StandaloneOptions struct {
	Enabled bool
	// DataDir holds the embedded etcd, the PKI and admin.kubeconfig.
	DataDir string
	// AlternateDNS are extra names for the generated serving certificate.
	AlternateDNS []string

	stdout io.Writer
}

// NewStandaloneOptions returns the defaults (standalone mode off).
func NewStandaloneOptions(stdout io.Writer) *StandaloneOptions {
	return &StandaloneOptions{DataDir: DefaultDataDir, stdout: stdout}
}

// AddFlags adds standalone mode's flags.
func (o *StandaloneOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "standalone", o.Enabled,
		"Run without a Kubernetes cluster: embedded etcd, a PKI generated in --data-dir on first start, "+
			"an admin kubeconfig in --data-dir/admin.kubeconfig, and a built-in authorizer (system:masters may do anything, "+
			"other authenticated users may request certificates).")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "Directory for the embedded etcd, PKI and admin kubeconfig in --standalone mode.")
	fs.StringSliceVar(&o.AlternateDNS, "alternate-dns", o.AlternateDNS, "Extra DNS names for the generated serving certificate.")
}

// Validate reports invalid standalone options.
func (o *StandaloneOptions) Validate() []error {
	if o.Enabled && o.DataDir == "" {
		return []error{fmt.Errorf("--data-dir is required with --standalone")}
	}
	return nil
}

// Complete creates the PKI and the key-encryption key (once) and points the
// generic options at them and at the embedded etcd's socket.
func (o *StandaloneOptions) Complete(ro *genericoptions.RecommendedOptions, keys *KeyStoreOptions, embedded *EmbeddedEtcdOptions) error {
	if !o.Enabled {
		return nil
	}
	var err error
	if o.DataDir, err = privateDir("--data-dir", o.DataDir); err != nil {
		return err
	}
	pki := o.pki()
	hosts := append([]string{"localhost"}, o.AlternateDNS...)
	if err := pki.Ensure(hosts, []net.IP{netutils.ParseIPSloppy("127.0.0.1"), net.IPv6loopback}); err != nil {
		return fmt.Errorf("preparing standalone PKI in %s: %w", pki.Dir, err)
	}
	if keys.KEKFile == "" && keys.KEKSecret == "" {
		keys.KEKFile = pki.Path(KEKFileName)
		if err := ensureKEK(keys.KEKFile); err != nil {
			return err
		}
	}
	// With --etcd-servers, standalone mode uses that etcd (replicas share
	// it); without, it runs one inside the process.
	if len(ro.Etcd.StorageConfig.Transport.ServerList) == 0 && embedded.Dir == "" {
		embedded.Dir = o.DataDir
	}
	if ro.SecureServing.ServerCert.CertKey.CertFile == "" {
		ro.SecureServing.ServerCert.CertKey.CertFile = pki.Path(standalone.ServingCertFile)
		ro.SecureServing.ServerCert.CertKey.KeyFile = pki.Path(standalone.ServingKeyFile)
	}
	if ro.SecureServing.BindAddress == nil || ro.SecureServing.BindAddress.IsUnspecified() {
		ro.SecureServing.BindAddress = netutils.ParseIPSloppy("127.0.0.1")
	}
	ro.Authentication.RemoteKubeConfigFileOptional = true
	ro.Authentication.SkipInClusterLookup = true
	if ro.Authentication.ClientCert.ClientCA == "" {
		ro.Authentication.ClientCert.ClientCA = pki.Path(standalone.ClientCAFile)
	}
	// No cluster to delegate to: authorization, core API access, webhook
	// admission and priority-and-fairness all need one.
	ro.Authorization = nil
	ro.CoreAPI = nil
	ro.Admission = nil
	ro.Features.EnablePriorityAndFairness = false
	return nil
}

// ApplyTo installs the built-in authorizer and rekey's admission plugins,
// which RecommendedOptions cannot build without a cluster, the embedded
// etcd, and the hook that writes the admin kubeconfig.
func (o *StandaloneOptions) ApplyTo(c *genericapiserver.RecommendedConfig, extra *apiserver.ExtraConfig, serving *genericoptions.SecureServingOptionsWithLoopback, initializers ...admission.PluginInitializer) error {
	if !o.Enabled {
		return nil
	}
	authz := standalone.NewAuthorizer()
	c.Authorization.Authorizer = authz
	// No kube-apiserver answers SelfSubjectReviews and
	// SelfSubjectAccessReviews here: rekey does (kubectl auth whoami/can-i).
	extra.SelfReviews = authz
	// Nodes authenticate with the certificates rekey's kubelet client
	// signer gave them, as a cluster's kube-apiserver would once that CA is
	// in its --client-ca-file.
	extra.NodeTrust = &standalone.NodeTrust{}
	nodes := group.NewAuthenticatedGroupAdder(extra.NodeTrust.Authenticator())
	if c.Authentication.Authenticator == nil {
		c.Authentication.Authenticator = nodes
	} else {
		// After the usual authenticators: a user's certificate is verified
		// once, and only a certificate they refuse is tried as a node's.
		c.Authentication.Authenticator = authenticatorunion.New(c.Authentication.Authenticator, nodes)
	}
	c.RuleResolver = nil
	plugins := admission.NewPlugins()
	rekeyadmission.RegisterAll(plugins)
	initializer := genericadmissioninit.New(nil, nil, nil, authz, c.FeatureGate, c.EffectiveVersion, c.DrainedNotify(), nil)
	all := append(admission.PluginInitializers{initializer}, initializers...)
	chain, err := plugins.NewFromPlugins(rekeyadmission.PluginNames, emptyConfig{}, all, admission.Decorators{})
	if err != nil {
		return fmt.Errorf("building admission chain: %w", err)
	}
	c.AdmissionControl = chain
	if extra.PostStartHooks == nil {
		extra.PostStartHooks = map[string]genericapiserver.PostStartHookFunc{}
	}
	extra.PostStartHooks["rekey-admin-kubeconfig"] = func(genericapiserver.PostStartHookContext) error {
		return o.writeAdminKubeconfig(serving)
	}
	return nil
}

type emptyConfig struct{}

func (emptyConfig) ConfigFor(string) (io.Reader, error) { return nil, nil }

func (o *StandaloneOptions) pki() standalone.PKI {
	return standalone.PKI{Dir: filepath.Join(o.DataDir, "pki")}
}

// AdminKubeconfigPath is where standalone mode writes the admin kubeconfig.
func (o *StandaloneOptions) AdminKubeconfigPath() string {
	return filepath.Join(o.DataDir, standalone.AdminKubeconfigFile)
}

func (o *StandaloneOptions) writeAdminKubeconfig(ss *genericoptions.SecureServingOptionsWithLoopback) error {
	host := ss.BindAddress.String()
	if ss.BindAddress.IsUnspecified() {
		host = "127.0.0.1"
	}
	server := "https://" + net.JoinHostPort(host, fmt.Sprint(ss.BindPort))
	if ss.Listener != nil {
		if addr, ok := ss.Listener.Addr().(*net.TCPAddr); ok {
			server = "https://" + net.JoinHostPort(host, fmt.Sprint(addr.Port))
		}
	}
	path := o.AdminKubeconfigPath()
	if err := o.pki().WriteAdminKubeconfig(path, server); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	fmt.Fprintf(o.stdout, "rekey-apiserver is serving on %s\nadmin kubeconfig: %s\n  export KUBECONFIG=%s\n", server, path, path)
	return nil
}
