package server

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	authenticatorunion "k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/pkg/server/healthz"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"

	"rekey.io/rekey/pkg/apiserver/authnready"
	"rekey.io/rekey/pkg/apiserver/peerverify"
)

// certificateAuthenticators returns authenticators that verify the front
// proxy's certificate and (with --client-ca-file) clients' certificates
// once per connection (package peerverify), with the same CA bundles as
// the generic authenticators, which stay behind them for everything else
// and for the errors. nil when neither is configured.
func certificateAuthenticators(authn *genericoptions.DelegatingAuthenticationOptions, c *genericapiserver.RecommendedConfig) (authenticator.Request, error) {
	var fast []authenticator.Request
	if frontProxyConfigured(c.Authentication) {
		rh := c.Authentication.RequestHeaderConfig
		headers := headerrequest.NewDynamic(rh.UsernameHeaders, rh.UIDHeaders, rh.GroupHeaders, rh.ExtraHeaderPrefixes)
		fast = append(fast, peerverify.FrontProxy(peerverify.New(nil), rh.CAContentProvider.VerifyOptions, rh.AllowedClientNames, headers))
	}
	if authn != nil && authn.ClientCert.ClientCA != "" {
		clientCA, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle-peerverify", authn.ClientCert.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("reading --client-ca-file: %w", err)
		}
		// Reloads the file when it changes, as the generic one does.
		if err := c.AddPostStartHook("rekey-client-ca-reload", func(ctx genericapiserver.PostStartHookContext) error {
			go clientCA.Run(ctx, 1)
			return nil
		}); err != nil {
			return nil, err
		}
		fast = append(fast, peerverify.ClientCertificate(peerverify.New(nil), clientCA.VerifyOptions, x509request.CommonNameUserConversion))
	}
	if len(fast) == 0 {
		return nil, nil
	}
	return group.NewAuthenticatedGroupAdder(authenticatorunion.New(fast...)), nil
}

// frontProxyConfigured says whether requests may come through an
// authenticating front proxy: then FrontProxy is installed.
func frontProxyConfigured(a genericapiserver.AuthenticationInfo) bool {
	return a.RequestHeaderConfig != nil && a.RequestHeaderConfig.CAContentProvider != nil
}

// authenticationConfigMap is where kube-apiserver publishes the CAs the
// delegated authentication loads (k8s.io/apiserver's options use the same).
const authenticationConfigMapNamespace, authenticationConfigMapName = "kube-system", "extension-apiserver-authentication"

// authenticationGate prepares, before the options are applied, the gate
// that holds requests until the CAs the generic authenticators load from
// the authentication ConfigMap are there (package authnready says why).
// The client CA is loaded by a ConfigMap controller made here and handed
// to the options in place of the identical one they would make, so that
// the gate can watch it; the front proxy's comes with the applied
// RequestHeaderConfig, which finish adds. CAs from files need no gate.
type authenticationGate struct {
	authn   *genericoptions.DelegatingAuthenticationOptions
	client  kubernetes.Interface
	sources []authnready.Source
}

func newAuthenticationGate(authn *genericoptions.DelegatingAuthenticationOptions) (*authenticationGate, error) {
	g := &authenticationGate{authn: authn}
	if authn == nil || authn.SkipInClusterLookup {
		return g, nil
	}
	cfg, err := kubeClientConfig(authn.RemoteKubeConfigFile, authn.RemoteKubeConfigFileOptional)
	if err != nil || cfg == nil {
		return g, err
	}
	cfg.Timeout = 10 * time.Second
	if g.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if authn.ClientCert == (genericoptions.ClientCertAuthenticationOptions{}) {
		clientCA, err := dynamiccertificates.NewDynamicCAFromConfigMapController("client-ca", authenticationConfigMapNamespace, authenticationConfigMapName, "client-ca-file", g.client)
		if err != nil {
			return nil, fmt.Errorf("watching the client CA in %s/%s: %w", authenticationConfigMapNamespace, authenticationConfigMapName, err)
		}
		authn.ClientCert.CAContentProvider = clientCA
		g.sources = append(g.sources, authnready.Source{Provider: clientCA, Key: "client-ca-file"})
	}
	return g, nil
}

// finish, after the options are applied, returns the gate, started by a
// post-start hook and reported by a readyz check.
func (g *authenticationGate) finish(c *genericapiserver.RecommendedConfig) (*authnready.Gate, error) {
	if g.client != nil && g.authn.RequestHeader.ClientCAFile == "" && frontProxyConfigured(c.Authentication) {
		g.sources = append(g.sources, authnready.Source{Provider: c.Authentication.RequestHeaderConfig.CAContentProvider, Key: "requestheader-client-ca-file"})
	}
	if len(g.sources) == 0 {
		return authnready.New(nil, nil, 0, 0), nil
	}
	keys := func(ctx context.Context) (map[string]bool, error) {
		cm, err := g.client.CoreV1().ConfigMaps(authenticationConfigMapNamespace).Get(ctx, authenticationConfigMapName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		present := map[string]bool{}
		for k, v := range cm.Data {
			present[k] = v != ""
		}
		return present, nil
	}
	// A request waits up to 10s (well inside client-go's and the
	// aggregator's timeouts); after 2 minutes the gate opens regardless.
	gate := authnready.New(g.sources, keys, 10*time.Second, 2*time.Minute)
	if err := c.AddPostStartHook("rekey-authentication-cas", func(ctx genericapiserver.PostStartHookContext) error {
		go gate.Run(ctx)
		return nil
	}); err != nil {
		return nil, err
	}
	c.ReadyzChecks = append(c.ReadyzChecks, healthz.NamedCheck("rekey-authentication-cas", gate.Check))
	return gate, nil
}
