package apiserver

import (
	"fmt"
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/controller/manager"
	"rekey.io/rekey/pkg/controller/publisher"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	"rekey.io/rekey/pkg/leaderelection"
	"rekey.io/rekey/pkg/servingcert"
)

// installControllers builds the controller manager from the server's
// shared parts, registers its post-start hook and a readiness check that
// fails while it cannot run, so a replica without working controllers is
// not taken for a healthy one.
func (c completedConfig) installControllers(s *Server, auth *authority.Service, replica informers.SharedInformerFactory, host *hostCluster) error {
	cfg, err := c.controllersClientConfig()
	if err != nil {
		return err
	}
	// The controllers are the server's own clients: do not throttle them,
	// and do not compress what never leaves the process (as kube-apiserver
	// does for its loopback client). The generated clients speak protobuf.
	cfg.QPS, cfg.Burst = 5000, 10000
	cfg.DisableCompression = true
	// With leader election, every write the controllers send checks, when
	// it is sent, that this replica still leads by its lease deadline: a
	// replica stopped past its lease and resumed must not write as a
	// leader while its goroutines have not yet seen the lease go.
	var fence *leaderelection.Fence
	if c.ExtraConfig.Controllers.LeaderElect {
		leaderelection.RegisterMetrics()
		fence = leaderelection.NewFence()
		cfg.Wrap(fence.WrapTransport)
	}
	client, err := clientset.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating the controllers' client: %w", err)
	}
	deps := manager.Deps{
		Client:        client,
		Authorizer:    c.GenericConfig.Authorization.Authorizer,
		Authority:     auth,
		CAs:           replica.Rotation().V1alpha1().CertificateAuthorities(),
		Signers:       replica.Certificates().V1alpha1().Signers(),
		Revocations:   revocationInformer(replica),
		Etcd:          s.etcd,
		PrivatePrefix: c.ExtraConfig.Etcd.PrivatePrefix,
		Fence:         fence,
		// The controllers wait and requeue on it, so it is a real clock
		// (ExtraConfig.Clock only stamps condition times).
		Clock: clock.RealClock{},
	}
	if host != nil {
		deps.Kube, deps.Cluster, deps.Published = host.kube, host.cluster, host.published
		if fence != nil {
			// The request path shares host.kube; the controllers get a
			// client of their own whose writes the fence checks.
			kubeConfig := rest.CopyConfig(c.ExtraConfig.KubeConfig)
			kubeConfig.Wrap(fence.WrapTransport)
			if deps.Kube, err = kubernetes.NewForConfig(kubeConfig); err != nil {
				return fmt.Errorf("creating the controllers' host cluster client: %w", err)
			}
		}
		publisherConfig := rest.AddUserAgent(rest.CopyConfig(c.ExtraConfig.KubeConfig), publisher.UserAgent)
		if fence != nil {
			publisherConfig.Wrap(fence.WrapTransport)
		}
		if deps.PublisherKube, err = kubernetes.NewForConfig(publisherConfig); err != nil {
			return fmt.Errorf("creating the publisher's host cluster client: %w", err)
		}
		if deps.PublisherAPIServices, err = dynamic.NewForConfig(publisherConfig); err != nil {
			return fmt.Errorf("creating the publisher's host cluster client: %w", err)
		}
		if s.crls != nil {
			deps.CRLs = s.crls
		}
	}
	if s.Controllers, err = manager.New(c.ExtraConfig.Controllers, deps); err != nil {
		return err
	}
	if err := s.GenericAPIServer.AddReadyzChecks(healthz.NamedCheck("rekey-controllers", s.Controllers.Check)); err != nil {
		return err
	}
	return s.GenericAPIServer.AddPostStartHook("rekey-controllers", func(hook genericapiserver.PostStartHookContext) error {
		s.goBackground(func() { s.Controllers.Run(hook) })
		return nil
	})
}

// controllersClientConfig is the loopback configuration with the
// controllers' own identity (the only writer of CA and Signer status).
// The generic configuration holds the loopback configuration the
// post-start hooks get, so the clients can be made before the server runs.
func (c completedConfig) controllersClientConfig() (*rest.Config, error) {
	loopback := c.GenericConfig.LoopbackClientConfig
	if loopback == nil {
		return nil, fmt.Errorf("no loopback client configuration")
	}
	if c.ExtraConfig.ControllerIdentity == nil {
		return rest.CopyConfig(loopback), nil
	}
	return c.ExtraConfig.ControllerIdentity.ClientConfig(rest.CopyConfig(loopback)), nil
}

// installServingCA starts, on every replica, the manager of rekey's own
// serving certificate when --serving-ca is set. It signs through the
// server's CA-key service and watches the replica's CA informer.
func (c completedConfig) installServingCA(s *Server, auth *authority.Service, replica informers.SharedInformerFactory, host *hostCluster) error {
	cfg := c.ExtraConfig.ServingCA
	if cfg == nil {
		return nil
	}
	restConfig, err := c.controllersClientConfig()
	if err != nil {
		return err
	}
	client, err := clientset.NewForConfig(rest.AddUserAgent(restConfig, servingcert.UserAgent))
	if err != nil {
		return fmt.Errorf("creating the serving CA client: %w", err)
	}
	replicaName, _ := os.Hostname()
	deps := servingcert.Deps{
		Replica:     replicaName,
		Authorities: auth.Authorities,
		Records:     auth.Records,
		CAs:         replica.Rotation().V1alpha1().CertificateAuthorities(),
		Client:      client,
		Clock:       c.ExtraConfig.Clock,
	}
	if host != nil {
		apiServices := rest.AddUserAgent(rest.CopyConfig(c.ExtraConfig.KubeConfig), servingcert.UserAgent)
		if deps.APIServices, err = dynamic.NewForConfig(apiServices); err != nil {
			return fmt.Errorf("creating the APIService client: %w", err)
		}
		deps.Published = host.published
	}
	m := servingcert.New(*cfg, deps)
	return s.GenericAPIServer.AddPostStartHook("rekey-serving-ca", func(hook genericapiserver.PostStartHookContext) error {
		s.goBackground(func() { m.Run(hook) })
		return nil
	})
}
