package server

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/authorization/path"
	"k8s.io/apiserver/pkg/authorization/union"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apiserver/nodeclientauthz"
	"rekey.io/rekey/pkg/apiserver/peerverify"
)

// Authorization QPS defaults: the generic delegating authorizer holds its
// SubjectAccessReview client to 200 requests a second. rekey sends one
// review per request from a user it has not seen in the last
// --authorization-webhook-cache-authorized-ttl, and one more per NodeClient
// approval; in a bootstrap burst every node is a new user, so 200/s caps
// how fast a cluster's nodes get their certificates.
const (
	defaultAuthorizationQPS   = 2000
	defaultAuthorizationBurst = 4000
)

// AuthorizationRateOptions limit the SubjectAccessReviews rekey sends to the
// cluster (delegated authorization and NodeClient approval).
type AuthorizationRateOptions struct {
	QPS   float32
	Burst int
}

// NewAuthorizationRateOptions returns the defaults.
func NewAuthorizationRateOptions() *AuthorizationRateOptions {
	return &AuthorizationRateOptions{QPS: defaultAuthorizationQPS, Burst: defaultAuthorizationBurst}
}

// AddFlags adds the rate flags.
func (o *AuthorizationRateOptions) AddFlags(fs *pflag.FlagSet) {
	fs.Float32Var(&o.QPS, "authorization-webhook-qps", o.QPS,
		"SubjectAccessReviews a second rekey may send to the cluster, for authorization and NodeClient approval.")
	fs.IntVar(&o.Burst, "authorization-webhook-burst", o.Burst,
		"Burst of SubjectAccessReviews above --authorization-webhook-qps.")
}

// Validate reports invalid rates.
func (o *AuthorizationRateOptions) Validate() []error {
	if o.QPS <= 0 || o.Burst < 1 {
		return []error{errors.New("--authorization-webhook-qps and --authorization-webhook-burst must be positive")}
	}
	return nil
}

// ApplyTo makes the delegated authorizer (when there is one) use the rate,
// and hands rekey's plugins what they read (initializers).
func (o *AuthorizationRateOptions) ApplyTo(ro *genericoptions.RecommendedOptions, initializers ...admission.PluginInitializer) {
	install := func(*genericapiserver.RecommendedConfig) ([]admission.PluginInitializer, error) { return nil, nil }
	if ro.Authorization != nil {
		install = installDelegatedAuthorizer(ro.Authorization, o.QPS, o.Burst)
	}
	ro.ExtraAdmissionInitializers = func(c *genericapiserver.RecommendedConfig) ([]admission.PluginInitializer, error) {
		extra, err := install(c)
		return append(extra, initializers...), err
	}
}

// installDelegatedAuthorizer replaces the authorizer RecommendedOptions built
// with the same one (always-allowed groups and paths, then the cached
// SubjectAccessReview webhook) whose client may send qps reviews a second.
// It runs as RecommendedOptions' extra admission initializer hook, the one
// point after authorization is applied and before the admission plugins are
// handed the authorizer, so that they and the approver use it too.
func installDelegatedAuthorizer(o *genericoptions.DelegatingAuthorizationOptions, qps float32, burst int) func(*genericapiserver.RecommendedConfig) ([]admission.PluginInitializer, error) {
	return func(c *genericapiserver.RecommendedConfig) ([]admission.PluginInitializer, error) {
		if o == nil {
			return nil, nil
		}
		cfg, err := authorizationClientConfig(o, qps, burst)
		if err != nil || cfg == nil {
			return nil, err
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("creating the authorization client: %w", err)
		}
		a, err := delegatedAuthorizer(o, client)
		if err != nil {
			return nil, err
		}
		// NodeClient creates forwarded by the front proxy are asked about
		// for any name first, which the cache answers for a bootstrap
		// identity's whole burst (package nodeclientauthz says why that
		// is no weaker).
		c.Authorization.Authorizer = &nodeclientauthz.Authorizer{Delegate: a, Group: certificates.GroupName, ViaFrontProxy: peerverify.ViaFrontProxy}
		return nil, nil
	}
}

// authorizationClientConfig reads --authorization-kubeconfig, or the
// in-cluster configuration, with the given rate limit; nil when neither
// exists and that is allowed.
func authorizationClientConfig(o *genericoptions.DelegatingAuthorizationOptions, qps float32, burst int) (*rest.Config, error) {
	cfg, err := kubeClientConfig(o.RemoteKubeConfigFile, o.RemoteKubeConfigFileOptional)
	if err != nil || cfg == nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = qps, burst
	cfg.Timeout = o.ClientTimeout
	// SubjectAccessReviews are built-in objects: protobuf costs both ends
	// less than JSON, and a bootstrap burst sends two per node.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if o.CustomRoundTripperFn != nil {
		cfg.Wrap(o.CustomRoundTripperFn)
	}
	return cfg, nil
}

func delegatedAuthorizer(o *genericoptions.DelegatingAuthorizationOptions, client kubernetes.Interface) (authorizer.Authorizer, error) {
	var authorizers []union.NamedAuthorizer
	if len(o.AlwaysAllowGroups) > 0 {
		authorizers = append(authorizers, union.NamedAuthorizer{
			AuthorizerName: "kubernetes.io/always-allow-groups",
			Authorizer:     authorizerfactory.NewPrivilegedGroups(o.AlwaysAllowGroups...),
		})
	}
	if len(o.AlwaysAllowPaths) > 0 {
		a, err := path.NewAuthorizer(o.AlwaysAllowPaths)
		if err != nil {
			return nil, fmt.Errorf("--authorization-always-allow-paths: %w", err)
		}
		authorizers = append(authorizers, union.NamedAuthorizer{AuthorizerName: "kubernetes.io/always-allow-paths", Authorizer: a})
	}
	webhook, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             o.AllowCacheTTL,
		DenyCacheTTL:              o.DenyCacheTTL,
		WebhookRetryBackoff:       o.WebhookRetryBackoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("creating the SubjectAccessReview authorizer: %w", err)
	}
	authorizers = append(authorizers, union.NamedAuthorizer{AuthorizerName: "kubernetes.io/webhook", Authorizer: webhook})
	return union.New(authorizers...)
}

// kubeClientConfig reads the kubeconfig file, or without one the
// in-cluster configuration; nil when there is neither and that is allowed.
func kubeClientConfig(file string, optional bool) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if file != "" {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: file}
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	} else {
		cfg, err = rest.InClusterConfig()
		if err == rest.ErrNotInCluster && optional {
			return nil, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the delegated kubeconfig: %w", err)
	}
	return cfg, nil
}
