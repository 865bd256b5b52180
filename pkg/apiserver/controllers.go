package apiserver

import (
	"fmt"
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/controller/manager"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/servingcert"
	"rekey.io/rekey/pkg/signing/cabinding"
)

// installControllers registers the controllers' post-start hook and a
// readiness check that fails while the controller manager cannot run, so a
// replica without working controllers is not taken for a healthy one.
func (c completedConfig) installControllers(s *Server, keyStores *authority.KeyStores) error {
	opts := c.ExtraConfig.Controllers
	opts.Etcd = s.etcd
	opts.PrivatePrefix = c.ExtraConfig.Etcd.PrivatePrefix
	opts.KeyStores = keyStores
	opts.Authorizer = c.GenericConfig.Authorization.Authorizer
	// The host cluster, when there is one (never in standalone mode).
	opts.KubeConfig = c.ExtraConfig.KubeConfig
	s.Controllers = manager.New(opts)
	if err := s.GenericAPIServer.AddReadyzChecks(healthz.NamedCheck("rekey-controllers", s.Controllers.Check)); err != nil {
		return err
	}
	if err := c.installServingCA(s, opts.KeyStores); err != nil {
		return err
	}
	return s.GenericAPIServer.AddPostStartHook("rekey-controllers", func(hook genericapiserver.PostStartHookContext) error {
		s.goBackground(func() { s.Controllers.Run(hook, c.controllersClientConfig(hook)) })
		return nil
	})
}

// controllersClientConfig is the loopback configuration with the
// controllers' own identity (the only writer of CA and Signer status).
func (c completedConfig) controllersClientConfig(hook genericapiserver.PostStartHookContext) *rest.Config {
	if c.ExtraConfig.ControllerIdentity == nil {
		return hook.LoopbackClientConfig
	}
	return c.ExtraConfig.ControllerIdentity.ClientConfig(hook.LoopbackClientConfig)
}

// installServingCA starts, on every replica, the manager of rekey's own
// serving certificate when --serving-ca is set.
func (c completedConfig) installServingCA(s *Server, stores *authority.KeyStores) error {
	cfg := c.ExtraConfig.ServingCA
	if cfg == nil {
		return nil
	}
	var kube dynamic.Interface
	if c.ExtraConfig.KubeConfig != nil {
		var err error
		if kube, err = dynamic.NewForConfig(c.ExtraConfig.KubeConfig); err != nil {
			return fmt.Errorf("creating the APIService client: %w", err)
		}
	}
	host, _ := os.Hostname()
	return s.GenericAPIServer.AddPostStartHook("rekey-serving-ca", func(hook genericapiserver.PostStartHookContext) error {
		bindings := cabinding.NewEtcdStore(s.etcd, c.ExtraConfig.Etcd.PrivatePrefix)
		records := issuance.NewRecorder(hook, s.etcd, c.ExtraConfig.Etcd.PrivatePrefix)
		m := servingcert.NewManager(*cfg, host, stores, bindings, records, kube)
		s.goBackground(func() { m.Run(hook, c.controllersClientConfig(hook)) })
		return nil
	})
}
