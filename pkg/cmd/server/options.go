// Package server holds rekey-apiserver's options and command: the generic
// RecommendedOptions plus rekey's own flags, then Complete, Validate,
// Config and Run.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"time"

	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"
	authenticatorunion "k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/features"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	netutils "k8s.io/utils/net"

	rekeyadmission "rekey.io/rekey/pkg/admission"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/apiserver"
	"rekey.io/rekey/pkg/apiserver/filters"
	"rekey.io/rekey/pkg/controller/certificateauthority"
	"rekey.io/rekey/pkg/controller/manager"
	rekeyopenapi "rekey.io/rekey/pkg/generated/openapi"
	"rekey.io/rekey/pkg/serveridentity"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/keystorepaths"
	"rekey.io/rekey/pkg/standalone"
)

const (
	defaultEtcdPathPrefix = "/registry/rekey.io"
	// DefaultDataDir is where a standalone server keeps etcd and its PKI.
	DefaultDataDir = ".rekey"
	// DefaultSecurePort is the port rekey serves on unless told otherwise.
	DefaultSecurePort = 8443
)

// Options is everything rekey-apiserver can be told on its command line.
type Options struct {
	RecommendedOptions *genericoptions.RecommendedOptions

	// Standalone runs with an embedded etcd, a generated PKI and a built-in
	// authorizer instead of delegating to a kube-apiserver.
	Standalone bool
	// DataDir holds the embedded etcd, the PKI and admin.kubeconfig.
	DataDir string
	// AlternateDNS are extra names for the generated serving certificate.
	AlternateDNS []string

	// KEKFile holds the key-encryption key of CA keys stored in etcd.
	KEKFile string
	// PrivatePrefix is the etcd prefix of data the API never serves: CA
	// keys, issuance records, the leader election.
	PrivatePrefix string
	// LeaderElect runs the controllers on one replica at a time.
	LeaderElect   bool
	LeaseDuration time.Duration
	// SignerWorkers is the number of concurrent signing workers.
	SignerWorkers int
	// CleanerInterval is how often finished requests are deleted.
	CleanerInterval time.Duration
	// AuthorizationQPS and AuthorizationBurst limit the SubjectAccessReviews
	// sent to the cluster (delegated authorization and NodeClient approval).
	AuthorizationQPS   float32
	AuthorizationBurst int
	// KeyStorePaths are the PKCS#11 modules and the directories of CA and
	// PIN files that CertificateAuthorities may name.
	KeyStorePaths keystorepaths.Allowed

	embedEtcd bool

	Stdout io.Writer
	Stderr io.Writer
}

// NewOptions returns options with rekey's defaults.
func NewOptions(stdout, stderr io.Writer) *Options {
	o := &Options{
		RecommendedOptions: genericoptions.NewRecommendedOptions(
			defaultEtcdPathPrefix,
			apiserver.Codecs.LegacyCodec(certv1alpha1.SchemeGroupVersion, rotationv1alpha1.SchemeGroupVersion),
		),
		DataDir:         DefaultDataDir,
		PrivatePrefix:   "/rekey.io-private",
		LeaderElect:     true,
		LeaseDuration:   15 * time.Second,
		SignerWorkers:   8,
		CleanerInterval: time.Minute,

		AuthorizationQPS:   defaultAuthorizationQPS,
		AuthorizationBurst: defaultAuthorizationBurst,
		Stdout:             stdout,
		Stderr:             stderr,
	}
	// Each group is stored in its own version.
	o.RecommendedOptions.Etcd.StorageConfig.EncodeVersioner = schema.GroupVersions{
		certv1alpha1.SchemeGroupVersion, rotationv1alpha1.SchemeGroupVersion}
	// Objects are stored as protobuf, as kube-apiserver stores its own:
	// decoding protobuf is several times cheaper than JSON, and every write
	// decodes the stored object more than once. Data written as JSON (by
	// --storage-media-type=application/json or an earlier version) still reads.
	o.RecommendedOptions.Etcd.DefaultStorageMediaType = runtime.ContentTypeProtobuf
	o.RecommendedOptions.SecureServing.BindPort = DefaultSecurePort
	// Profiling handlers are off unless asked for (--profiling).
	o.RecommendedOptions.Features.EnableProfiling = false
	rekeyadmission.RegisterAll(o.RecommendedOptions.Admission.Plugins)
	// Watch-list streams (what informers open, including the controllers'
	// own) are not gzipped unless --feature-gates turns it back on: after
	// the initial list, every event is one object of a few kilobytes flushed
	// on its own, where per-flush compression costs both ends more CPU than
	// it saves bytes.
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(features.WatchListCompression): false}); err != nil {
		panic(fmt.Sprintf("feature gate %s: %v", features.WatchListCompression, err))
	}
	o.RecommendedOptions.Admission.RecommendedPluginOrder = append(o.RecommendedOptions.Admission.RecommendedPluginOrder, rekeyadmission.PluginNames...)
	return o
}

// storageCodec encodes objects for etcd in the given media type, each group
// in its storage version, and decodes whatever media type was stored.
func storageCodec(mediaType string) (runtime.Codec, error) {
	info, ok := runtime.SerializerInfoForMediaType(apiserver.Codecs.SupportedMediaTypes(), mediaType)
	if !ok {
		return nil, fmt.Errorf("--storage-media-type %q is not supported; use %s (default), %s or %s",
			mediaType, runtime.ContentTypeProtobuf, runtime.ContentTypeJSON, runtime.ContentTypeYAML)
	}
	return apiserver.Codecs.CodecForVersions(info.Serializer, apiserver.Codecs.UniversalDeserializer(),
		schema.GroupVersions{certv1alpha1.SchemeGroupVersion, rotationv1alpha1.SchemeGroupVersion},
		runtime.InternalGroupVersioner), nil
}

// Flags returns the flags by section, as `--help` prints them.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	rekey := fss.FlagSet("rekey")
	rekey.BoolVar(&o.Standalone, "standalone", o.Standalone,
		"Run without a Kubernetes cluster: embedded etcd, a PKI generated in --data-dir on first start, "+
			"an admin kubeconfig in --data-dir/admin.kubeconfig, and a built-in authorizer (system:masters may do anything, "+
			"other authenticated users may request certificates).")
	rekey.StringVar(&o.DataDir, "data-dir", o.DataDir, "Directory for the embedded etcd, PKI and admin kubeconfig in --standalone mode.")
	rekey.StringSliceVar(&o.AlternateDNS, "alternate-dns", o.AlternateDNS, "Extra DNS names for the generated serving certificate.")

	ctrl := fss.FlagSet("controllers")
	ctrl.StringVar(&o.KEKFile, "ca-key-encryption-key-file", o.KEKFile,
		"File with the 32-byte key-encryption key (raw, base64 or hex) that encrypts CA keys stored in etcd. "+
			"Required unless --standalone, which generates <data-dir>/pki/ca-kek.key on first start. Starting with a different key than before fails.")
	ctrl.StringVar(&o.PrivatePrefix, "etcd-private-prefix", o.PrivatePrefix, "etcd prefix for CA keys, issuance records and the leader election; no API resource maps to it.")
	ctrl.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Run the controllers only on the replica elected through etcd.")
	ctrl.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "How long a dead leader holds the lease before another replica takes over.")
	ctrl.IntVar(&o.SignerWorkers, "signer-workers", o.SignerWorkers, "Concurrent signing workers.")
	ctrl.DurationVar(&o.CleanerInterval, "csr-cleaner-interval", o.CleanerInterval, "How often finished and abandoned requests are deleted.")
	ctrl.StringSliceVar(&o.KeyStorePaths.PKCS11Modules, "pkcs11-module", o.KeyStorePaths.PKCS11Modules,
		"Absolute path of a PKCS#11 module that CertificateAuthorities may use (repeat for several). A module runs inside rekey-apiserver; "+
			"none is allowed unless listed here.")
	ctrl.StringSliceVar(&o.KeyStorePaths.Dirs, "file-keystore-dir", o.KeyStorePaths.Dirs,
		"Directory whose files CertificateAuthorities may name as File key-store certificate and key, or as PKCS#11 PIN file (repeat for several). "+
			"No file is readable unless its directory is listed here.")

	generic := fss.FlagSet("generic")
	generic.Float32Var(&o.AuthorizationQPS, "authorization-webhook-qps", o.AuthorizationQPS,
		"SubjectAccessReviews a second rekey may send to the cluster, for authorization and NodeClient approval.")
	generic.IntVar(&o.AuthorizationBurst, "authorization-webhook-burst", o.AuthorizationBurst,
		"Burst of SubjectAccessReviews above --authorization-webhook-qps.")
	o.RecommendedOptions.AddFlags(generic)
	utilfeature.DefaultMutableFeatureGate.AddFlag(generic)
	return fss
}

// AddFlags adds every flag to one flag set.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	for _, f := range o.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
}

// Complete fills in what follows from other options. In standalone mode it
// creates the PKI (once) and picks the embedded etcd's address.
func (o *Options) Complete() error {
	codec, err := storageCodec(o.RecommendedOptions.Etcd.DefaultStorageMediaType)
	if err != nil {
		return err
	}
	o.RecommendedOptions.Etcd.StorageConfig.Codec = codec
	if !o.Standalone {
		return nil
	}
	abs, err := filepath.Abs(o.DataDir)
	if err != nil {
		return fmt.Errorf("resolving --data-dir: %w", err)
	}
	o.DataDir = abs
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return fmt.Errorf("creating --data-dir: %w", err)
	}
	pki := o.pki()
	hosts := append([]string{"localhost"}, o.AlternateDNS...)
	if err := pki.Ensure(hosts, []net.IP{netutils.ParseIPSloppy("127.0.0.1"), net.IPv6loopback}); err != nil {
		return fmt.Errorf("preparing standalone PKI in %s: %w", pki.Dir, err)
	}

	if o.KEKFile == "" {
		o.KEKFile = pki.Path(KEKFileName)
		if err := ensureKEK(o.KEKFile); err != nil {
			return err
		}
	}

	ro := o.RecommendedOptions
	// With --etcd-servers, standalone mode uses that etcd (replicas share
	// it); without, it runs one inside the process.
	o.embedEtcd = len(ro.Etcd.StorageConfig.Transport.ServerList) == 0
	if o.embedEtcd {
		ro.Etcd.StorageConfig.Transport.ServerList = []string{standalone.EtcdClientURL(o.DataDir)}
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

func (o *Options) pki() standalone.PKI {
	return standalone.PKI{Dir: filepath.Join(o.DataDir, "pki")}
}

// AdminKubeconfigPath is where standalone mode writes the admin kubeconfig.
func (o *Options) AdminKubeconfigPath() string {
	return filepath.Join(o.DataDir, standalone.AdminKubeconfigFile)
}

// Validate reports every invalid option at once.
func (o *Options) Validate() error {
	var errs []error
	errs = append(errs, o.RecommendedOptions.Validate()...)
	if !o.Standalone && len(o.RecommendedOptions.Etcd.StorageConfig.Transport.ServerList) == 0 {
		errs = append(errs, errors.New("--etcd-servers is required unless --standalone is set"))
	}
	if o.KEKFile == "" {
		errs = append(errs, errors.New("--ca-key-encryption-key-file is required unless --standalone is set: the built-in CAs keep their keys in etcd encrypted with it"))
	}
	if o.AuthorizationQPS <= 0 || o.AuthorizationBurst < 1 {
		errs = append(errs, errors.New("--authorization-webhook-qps and --authorization-webhook-burst must be positive"))
	}
	if o.SignerWorkers < 1 {
		errs = append(errs, errors.New("--signer-workers must be at least 1"))
	}
	errs = append(errs, o.KeyStorePaths.Validate()...)
	if o.LeaseDuration < time.Second {
		errs = append(errs, errors.New("--leader-elect-lease-duration must be at least 1s"))
	}
	return utilerrors.NewAggregate(errs)
}

// Config builds the server configuration.
func (o *Options) Config() (*apiserver.Config, error) {
	ro := o.RecommendedOptions
	if err := ro.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", o.AlternateDNS, []net.IP{netutils.ParseIPSloppy("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("creating self-signed serving certificate: %w", err)
	}

	genericConfig := genericapiserver.NewRecommendedConfig(apiserver.Codecs)
	namer := openapi.NewDefinitionNamer(apiserver.Scheme)
	genericConfig.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(rekeyopenapi.GetOpenAPIDefinitions, namer)
	genericConfig.OpenAPIConfig.Info.Title = "rekey"
	genericConfig.OpenAPIConfig.Info.Version = "v0.1.0"
	genericConfig.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(rekeyopenapi.GetOpenAPIDefinitions, namer)
	genericConfig.OpenAPIV3Config.Info.Title = "rekey"
	genericConfig.OpenAPIV3Config.Info.Version = "v0.1.0"
	// Admission reads these, and Complete panics on a nil EffectiveVersion,
	// so they are set before ApplyTo.
	genericConfig.FeatureGate = utilfeature.DefaultFeatureGate
	genericConfig.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()

	// Every response passes through WithoutRedirects: an aggregated server
	// must never answer 3xx.
	genericConfig.BuildHandlerChainFunc = func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		return filters.WithoutRedirects(genericapiserver.DefaultBuildHandlerChain(apiHandler, c))
	}

	if ro.Authorization != nil {
		ro.ExtraAdmissionInitializers = installDelegatedAuthorizer(ro.Authorization, o.AuthorizationQPS, o.AuthorizationBurst)
	}
	if err := ro.ApplyTo(genericConfig); err != nil {
		return nil, fmt.Errorf("applying options: %w", err)
	}
	if o.Standalone {
		if err := o.applyStandalone(&genericConfig.Config); err != nil {
			return nil, err
		}
	}
	// The controllers authenticate with a token only this process knows,
	// ahead of every other authenticator (see package serveridentity).
	controllers, err := serveridentity.New()
	if err != nil {
		return nil, err
	}
	if genericConfig.Authentication.Authenticator == nil {
		genericConfig.Authentication.Authenticator = controllers.Authenticator()
	} else {
		genericConfig.Authentication.Authenticator = authenticatorunion.New(controllers.Authenticator(), genericConfig.Authentication.Authenticator)
	}
	return &apiserver.Config{GenericConfig: genericConfig, ExtraConfig: apiserver.ExtraConfig{
		ControllerIdentity: controllers,
		KeyStorePaths:      o.KeyStorePaths,
	}}, nil
}

// applyStandalone installs the built-in authorizer and rekey's admission
// plugins, which RecommendedOptions cannot build without a cluster.
func (o *Options) applyStandalone(c *genericapiserver.Config) error {
	authz := standalone.NewAuthorizer()
	c.Authorization.Authorizer = authz
	c.RuleResolver = nil

	plugins := admission.NewPlugins()
	rekeyadmission.RegisterAll(plugins)
	initializer := genericadmissioninit.New(nil, nil, nil, authz, c.FeatureGate, c.EffectiveVersion, c.DrainedNotify(), nil)
	chain, err := plugins.NewFromPlugins(rekeyadmission.PluginNames, emptyConfig{}, initializer, admission.Decorators{})
	if err != nil {
		return fmt.Errorf("building admission chain: %w", err)
	}
	c.AdmissionControl = chain
	return nil
}

type emptyConfig struct{}

func (emptyConfig) ConfigFor(string) (io.Reader, error) { return nil, nil }

// Run starts the embedded etcd (standalone), builds the server and serves
// until ctx is done.
func (o *Options) Run(ctx context.Context) error {
	if o.embedEtcd {
		etcd, err := standalone.StartEtcd(ctx, o.DataDir)
		if err != nil {
			return err
		}
		defer etcd.Close()
	}
	// The key-encryption key is checked before anything is served: a wrong
	// key fails start-up and changes nothing.
	etcdClient, err := o.newEtcdClient()
	if err != nil {
		return err
	}
	defer etcdClient.Close()
	kek, err := signing.LoadKEK(o.KEKFile)
	if err != nil {
		return err
	}
	etcdKeys, err := signing.NewEtcdKeyStore(ctx, etcdClient, o.PrivatePrefix, kek)
	clear(kek)
	if err != nil {
		return err
	}

	config, err := o.Config()
	if err != nil {
		return err
	}
	server, err := config.Complete().New()
	if err != nil {
		return err
	}
	server.GenericAPIServer.AddPostStartHookOrDie("rekey-controllers", func(hook genericapiserver.PostStartHookContext) error {
		go manager.Run(ctx, manager.Config{
			RESTConfig:      config.ExtraConfig.ControllerIdentity.ClientConfig(server.GenericAPIServer.LoopbackClientConfig),
			Authorizer:      config.GenericConfig.Authorization.Authorizer,
			KeyStores:       &certificateauthority.KeyStores{Etcd: etcdKeys, Allowed: o.KeyStorePaths},
			Etcd:            etcdClient,
			PrivatePrefix:   o.PrivatePrefix,
			LeaderElect:     o.LeaderElect,
			LeaseDuration:   o.LeaseDuration,
			Identity:        identity(),
			SignerWorkers:   o.SignerWorkers,
			CleanerInterval: o.CleanerInterval,
		})
		return nil
	})
	if o.Standalone {
		server.GenericAPIServer.AddPostStartHookOrDie("rekey-admin-kubeconfig", func(genericapiserver.PostStartHookContext) error {
			return o.writeAdminKubeconfig()
		})
	}
	return server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}

func (o *Options) writeAdminKubeconfig() error {
	ss := o.RecommendedOptions.SecureServing
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
	fmt.Fprintf(o.Stdout, "rekey-apiserver is serving on %s\nadmin kubeconfig: %s\n  export KUBECONFIG=%s\n", server, path, path)
	return nil
}
