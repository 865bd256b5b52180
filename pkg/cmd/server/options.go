// Package server holds rekey-apiserver's options and command: the generic
// RecommendedOptions plus rekey's option groups, each with AddFlags,
// Validate and ApplyTo. Options only parse, validate and fill in a
// configuration; pkg/apiserver assembles the server from it.
package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
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
	"rekey.io/rekey/pkg/admission/rekeyinit"
	attestationv1alpha1 "rekey.io/rekey/pkg/apis/attestation/v1alpha1"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/apiserver"
	"rekey.io/rekey/pkg/apiserver/authnready"
	"rekey.io/rekey/pkg/apiserver/filters"
	"rekey.io/rekey/pkg/apiserver/peerverify"
	"rekey.io/rekey/pkg/apiserver/publicpaths"
	rekeyopenapi "rekey.io/rekey/pkg/generated/openapi"
	"rekey.io/rekey/pkg/growstack"
	"rekey.io/rekey/pkg/revocation"
	"rekey.io/rekey/pkg/serveridentity"
	"rekey.io/rekey/pkg/version"
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

	Standalone        *StandaloneOptions
	EmbeddedEtcd      *EmbeddedEtcdOptions
	Controllers       *ControllerOptions
	KeyStores         *KeyStoreOptions
	AuthorizationRate *AuthorizationRateOptions
	ServingCA         *ServingCAOptions
	InFlight          *InFlightOptions
	GC                *GCOptions
	CRL               *CRLOptions
}

func init() {
	// Watch-list streams (what informers open, including the controllers'
	// own) are not gzipped unless --feature-gates turns it back on: after
	// the initial list, every event is one object of a few kilobytes flushed
	// on its own, where per-flush compression costs both ends more CPU than
	// it saves bytes. Overriding the default (rather than setting the gate)
	// keeps --help truthful.
	if err := utilfeature.DefaultMutableFeatureGate.OverrideDefault(features.WatchListCompression, false); err != nil {
		panic(fmt.Sprintf("feature gate %s: %v", features.WatchListCompression, err))
	}
}

// NewOptions returns options with rekey's defaults.
func NewOptions(stdout, stderr io.Writer) *Options {
	o := &Options{
		RecommendedOptions: genericoptions.NewRecommendedOptions(
			defaultEtcdPathPrefix,
			apiserver.Codecs.LegacyCodec(certv1alpha1.SchemeGroupVersion, rotationv1alpha1.SchemeGroupVersion, attestationv1alpha1.SchemeGroupVersion),
		),
		Standalone:        NewStandaloneOptions(stdout),
		EmbeddedEtcd:      NewEmbeddedEtcdOptions(),
		Controllers:       NewControllerOptions(),
		KeyStores:         NewKeyStoreOptions(),
		AuthorizationRate: NewAuthorizationRateOptions(),
		ServingCA:         NewServingCAOptions(),
		InFlight:          NewInFlightOptions(),
		GC:                NewGCOptions(),
		CRL:               NewCRLOptions(),
	}
	ro := o.RecommendedOptions
	// Each group is stored in its own version.
	ro.Etcd.StorageConfig.EncodeVersioner = schema.GroupVersions{certv1alpha1.SchemeGroupVersion, rotationv1alpha1.SchemeGroupVersion, attestationv1alpha1.SchemeGroupVersion}
	// Objects are stored as protobuf, as kube-apiserver stores its own:
	// decoding protobuf is several times cheaper than JSON, and every write
	// decodes the stored object more than once. Data written as JSON (by
	// --storage-media-type=application/json or an earlier version) still reads.
	ro.Etcd.DefaultStorageMediaType = runtime.ContentTypeProtobuf
	ro.SecureServing.BindPort = DefaultSecurePort
	// Profiling handlers are off unless asked for (--profiling).
	ro.Features.EnableProfiling = false
	// API priority and fairness is off unless asked for
	// (--enable-priority-and-fairness): every request the aggregation layer
	// forwards was already classified, queued and counted by kube-apiserver's
	// priority and fairness, under the same FlowSchemas and for the same
	// user; a second pass here costs CPU on every request (about 2.6% of
	// rekey's) and needs a cluster-wide permission to patch FlowSchema and
	// PriorityLevelConfiguration status. Without it, --max-requests-inflight
	// and --max-mutating-requests-inflight bound what rekey serves at once.
	ro.Features.EnablePriorityAndFairness = false
	rekeyadmission.RegisterAll(ro.Admission.Plugins)
	ro.Admission.RecommendedPluginOrder = append(ro.Admission.RecommendedPluginOrder, rekeyadmission.PluginNames...)
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
		schema.GroupVersions{certv1alpha1.SchemeGroupVersion, rotationv1alpha1.SchemeGroupVersion, attestationv1alpha1.SchemeGroupVersion},
		runtime.InternalGroupVersioner), nil
}

// Flags returns the flags by section, as `--help` prints them.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	o.Standalone.AddFlags(fss.FlagSet("rekey"))
	o.EmbeddedEtcd.AddFlags(fss.FlagSet("rekey"))
	o.CRL.AddFlags(fss.FlagSet("rekey"))
	ctrl := fss.FlagSet("controllers")
	o.Controllers.AddFlags(ctrl)
	o.KeyStores.AddFlags(ctrl)
	generic := fss.FlagSet("generic")
	o.AuthorizationRate.AddFlags(generic)
	o.InFlight.AddFlags(generic)
	o.GC.AddFlags(generic)
	o.ServingCA.AddFlags(generic)
	o.RecommendedOptions.AddFlags(generic)
	utilfeature.DefaultMutableFeatureGate.AddFlag(generic)
	return fss
}

// Complete fills in what follows from other options. In standalone mode it
// creates the PKI (once) and points etcd at the embedded one's socket.
func (o *Options) Complete() error {
	codec, err := storageCodec(o.RecommendedOptions.Etcd.DefaultStorageMediaType)
	if err != nil {
		return err
	}
	o.RecommendedOptions.Etcd.StorageConfig.Codec = codec
	if err := o.Standalone.Complete(o.RecommendedOptions, o.KeyStores, o.EmbeddedEtcd); err != nil {
		return err
	}
	return o.EmbeddedEtcd.Complete(o.RecommendedOptions)
}

// Validate reports every invalid option at once.
func (o *Options) Validate() error {
	var errs []error
	errs = append(errs, o.RecommendedOptions.Validate()...)
	if !o.Standalone.Enabled && len(o.RecommendedOptions.Etcd.StorageConfig.Transport.ServerList) == 0 {
		errs = append(errs, fmt.Errorf("--etcd-servers or --embedded-etcd-dir is required unless --standalone is set"))
	}
	errs = append(errs, o.Standalone.Validate()...)
	errs = append(errs, o.Controllers.Validate()...)
	errs = append(errs, o.KeyStores.Validate()...)
	errs = append(errs, o.AuthorizationRate.Validate()...)
	errs = append(errs, o.ServingCA.Validate()...)
	errs = append(errs, o.InFlight.Validate()...)
	errs = append(errs, o.GC.Validate()...)
	errs = append(errs, o.CRL.Validate()...)
	return utilerrors.NewAggregate(errs)
}

// Config builds the server configuration from the options.
func (o *Options) Config() (*apiserver.Config, error) {
	ro := o.RecommendedOptions
	if err := ro.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", o.Standalone.AlternateDNS, []net.IP{netutils.ParseIPSloppy("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("creating self-signed serving certificate: %w", err)
	}
	genericConfig := genericapiserver.NewRecommendedConfig(apiserver.Codecs)
	namer := openapi.NewDefinitionNamer(apiserver.Scheme)
	genericConfig.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(rekeyopenapi.GetOpenAPIDefinitions, namer)
	genericConfig.OpenAPIConfig.Info.Title = "rekey"
	genericConfig.OpenAPIConfig.Info.Version = "v" + version.Base
	genericConfig.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(rekeyopenapi.GetOpenAPIDefinitions, namer)
	genericConfig.OpenAPIV3Config.Info.Title = "rekey"
	genericConfig.OpenAPIV3Config.Info.Version = "v" + version.Base
	// Admission reads these, and Complete panics on a nil EffectiveVersion,
	// so they are set before ApplyTo.
	genericConfig.FeatureGate = utilfeature.DefaultFeatureGate
	genericConfig.EffectiveVersion = apiserver.EffectiveVersion(compatibility.DefaultBuildEffectiveVersion())
	// On SIGTERM, tell every open watch to end at once (clients re-list and
	// re-watch elsewhere or after the restart) instead of letting them hold
	// the HTTP server's shutdown until the kubelet's SIGKILL; this bounds the
	// wait for them to go (see docs/operations.md, Shutdown).
	genericConfig.ShutdownWatchTerminationGracePeriod = apiserver.WatchTerminationGracePeriod
	// Every response passes through WithoutRedirects: an aggregated server
	// must never answer 3xx. With a front proxy configured (the condition
	// under which certificateAuthenticators installs peerverify.FrontProxy),
	// WithFrontProxyRecord lets the authorizer see which requests it
	// authenticated (nodeclientauthz); without one, nothing would record.
	// Around it, authnGate holds requests that arrive before the
	// authentication CAs are loaded (package authnready). Outermost, the
	// public paths (the revocation webhook, the CRLs) are served without
	// authentication, and so without waiting for those CAs; the server
	// registers their handlers on the Mux while it is assembled.
	var authnGate *authnready.Gate
	public := publicpaths.New()
	genericConfig.BuildHandlerChainFunc = func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		// The version header is set inside the chain, after authentication:
		// it is for authenticated users only (WithVersionHeader).
		handler := filters.WithoutRedirects(genericapiserver.DefaultBuildHandlerChain(filters.WithVersionHeader(apiHandler, version.Get().GitVersion()), c))
		if frontProxyConfigured(c.Authentication) {
			handler = peerverify.WithFrontProxyRecord(handler)
		}
		return public.Wrap(authnGate.WithHold(handler))
	}

	// Plugins that read CertificateAuthorities get them from storage, which
	// the server makes later: the getter is bound then.
	cas, creds, signers := &rekeyinit.LateGetter{}, &rekeyinit.LateCredentialGetter{}, &rekeyinit.LateSignerGetter{}
	initializer := rekeyinit.Initializer{CertificateAuthorities: cas, RotatingCredentials: creds, Signers: signers}
	o.AuthorizationRate.ApplyTo(ro, initializer)
	// Before ro.ApplyTo: with --enable-priority-and-fairness, it sizes the
	// priority levels from these limits.
	o.InFlight.ApplyTo(&genericConfig.Config)
	gate, err := newAuthenticationGate(ro.Authentication)
	if err != nil {
		return nil, err
	}
	if err := ro.ApplyTo(genericConfig); err != nil {
		return nil, fmt.Errorf("applying options: %w", err)
	}
	if authnGate, err = gate.finish(genericConfig); err != nil {
		return nil, err
	}
	cfg := &apiserver.Config{GenericConfig: genericConfig}
	cfg.ExtraConfig.PublicPaths = public
	cfg.ExtraConfig.CertificateAuthorities = cas
	cfg.ExtraConfig.RotatingCredentials = creds
	cfg.ExtraConfig.Signers = signers
	cfg.ExtraConfig.KubeConfig = genericConfig.ClientConfig
	cfg.ExtraConfig.Etcd.Transport = ro.Etcd.StorageConfig.Transport
	o.Controllers.ApplyTo(&cfg.ExtraConfig)
	o.KeyStores.ApplyTo(&cfg.ExtraConfig)
	o.CRL.ApplyTo(&cfg.ExtraConfig)
	if err := o.Standalone.ApplyTo(genericConfig, &cfg.ExtraConfig, ro.SecureServing, initializer); err != nil {
		return nil, err
	}
	if err := o.ServingCA.ApplyTo(genericConfig, &cfg.ExtraConfig); err != nil {
		return nil, err
	}
	// The controllers authenticate with a token only this process knows,
	// ahead of every other authenticator (see package serveridentity).
	controllers, err := serveridentity.New()
	if err != nil {
		return nil, err
	}
	cfg.ExtraConfig.ControllerIdentity = controllers
	certificates, err := certificateAuthenticators(ro.Authentication, genericConfig)
	if err != nil {
		return nil, err
	}
	switch {
	case genericConfig.Authentication.Authenticator == nil:
		genericConfig.Authentication.Authenticator = controllers.Authenticator()
	case certificates != nil:
		genericConfig.Authentication.Authenticator = authenticatorunion.New(controllers.Authenticator(), certificates, genericConfig.Authentication.Authenticator)
	default:
		genericConfig.Authentication.Authenticator = authenticatorunion.New(controllers.Authenticator(), genericConfig.Authentication.Authenticator)
	}
	// A revoked certificate fails authentication whichever authenticator
	// took it (a client certificate here, or the extra the front proxy
	// forwards); the set is filled by the server (New).
	revoked := revocation.NewSet()
	cfg.ExtraConfig.Revocations = revoked
	genericConfig.Authentication.Authenticator = revocation.WithAuthenticator(revoked, genericConfig.Authentication.Authenticator, revocation.DefaultSyncHold)
	genericConfig.Authentication.Authenticator = growstack.WithAuthenticator(genericConfig.Authentication.Authenticator)
	return cfg, nil
}

// Run builds the server and serves until ctx is done. The embedded etcd
// (standalone) starts first, so that the clients the configuration makes
// find it.
func (o *Options) Run(ctx context.Context) error {
	if err := o.GC.Start(ctx); err != nil {
		return err
	}
	embedded, err := o.EmbeddedEtcd.Start(ctx)
	if err != nil {
		return err
	}
	config, err := o.Config()
	if err != nil {
		if embedded != nil {
			embedded.Close()
		}
		return err
	}
	config.ExtraConfig.Etcd.Embedded = embedded
	if embedded != nil {
		config.GenericConfig.RESTOptionsGetter = embedded.InProcess().RESTOptionsGetter(config.GenericConfig.RESTOptionsGetter, o.RecommendedOptions.Etcd.EnableWatchCache)
	}
	server, err := config.Complete().New(ctx)
	if err != nil {
		return err
	}
	return server.Run(ctx)
}
