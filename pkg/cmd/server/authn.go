package server

import (
	"fmt"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	authenticatorunion "k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	genericoptions "k8s.io/apiserver/pkg/server/options"

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
