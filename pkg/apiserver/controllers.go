package apiserver

import (
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"

	"rekey.io/rekey/pkg/controller/certificateauthority"
	"rekey.io/rekey/pkg/controller/manager"
	"rekey.io/rekey/pkg/signing"
)

// installControllers registers the controllers' post-start hook and a
// readiness check that fails while the controller manager cannot run, so a
// replica without working controllers is not taken for a healthy one.
func (c completedConfig) installControllers(s *Server, etcdKeys *signing.EtcdKeyStore) error {
	opts := c.ExtraConfig.Controllers
	opts.Etcd = s.etcd
	opts.PrivatePrefix = c.ExtraConfig.Etcd.PrivatePrefix
	opts.KeyStores = &certificateauthority.KeyStores{Etcd: etcdKeys, Allowed: c.ExtraConfig.KeyStores.Allowed}
	opts.Authorizer = c.GenericConfig.Authorization.Authorizer
	// The host cluster, when there is one (never in standalone mode).
	opts.KubeConfig = c.ExtraConfig.KubeConfig
	s.Controllers = manager.New(opts)
	if err := s.GenericAPIServer.AddReadyzChecks(healthz.NamedCheck("rekey-controllers", s.Controllers.Check)); err != nil {
		return err
	}
	return s.GenericAPIServer.AddPostStartHook("rekey-controllers", func(hook genericapiserver.PostStartHookContext) error {
		loopback := hook.LoopbackClientConfig
		if c.ExtraConfig.ControllerIdentity != nil {
			loopback = c.ExtraConfig.ControllerIdentity.ClientConfig(loopback)
		}
		go s.Controllers.Run(hook, loopback)
		return nil
	})
}
