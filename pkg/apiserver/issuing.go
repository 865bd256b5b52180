package apiserver

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rekey.io/rekey/pkg/controller/certificateauthority"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/issuer"
	"rekey.io/rekey/pkg/signing/cabinding"
)

// newSynchronousIssuer builds, on every replica, the issuer that decides in
// the approval and create writes (nil when --synchronous-issuance=false).
// It keeps its own cache of Signers and CertificateAuthorities, a few
// objects, and never one of requests; the cache starts once the server
// serves, and until it is complete every write is left to the controllers.
func (c completedConfig) newSynchronousIssuer(ctx context.Context, s *Server, keyStores *certificateauthority.KeyStores) (*issuer.Synchronous, error) {
	if !c.ExtraConfig.SynchronousIssuance {
		return nil, nil
	}
	client, err := c.loopbackClient()
	if err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	signers := factory.Certificates().V1alpha1().Signers()
	cas := factory.Rotation().V1alpha1().CertificateAuthorities()
	prefix := c.ExtraConfig.Etcd.PrivatePrefix
	sync := &issuer.Synchronous{
		Signing: &issuer.Signing{
			Authorities: certificateauthority.NewAuthorities(cas.Lister(), keyStores, cabinding.NewEtcdStore(s.etcd, prefix)),
			Recorder:    issuance.NewRecorder(ctx, s.etcd, prefix),
			Clock:       c.ExtraConfig.Clock,
		},
		Signers:    signers.Lister(),
		Synced:     func() bool { return signers.Informer().HasSynced() && cas.Informer().HasSynced() },
		Authorizer: c.GenericConfig.Authorization.Authorizer,
	}
	starts := []func(<-chan struct{}){factory.Start}
	if c.ExtraConfig.KubeConfig != nil {
		// NodeServing approval in the create reads the host cluster's
		// Nodes and Services.
		kube, err := kubernetes.NewForConfig(c.ExtraConfig.KubeConfig)
		if err != nil {
			return nil, fmt.Errorf("creating the host cluster client: %w", err)
		}
		all := kubeinformers.NewSharedInformerFactory(kube, 10*time.Minute)
		inDefault := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 10*time.Minute, kubeinformers.WithNamespace(corev1.NamespaceDefault))
		sync.Cluster = issuer.NewListerClusterView(all, inDefault)
		starts = append(starts, all.Start, inDefault.Start)
	}
	err = s.GenericAPIServer.AddPostStartHook("rekey-synchronous-issuer", func(hook genericapiserver.PostStartHookContext) error {
		for _, start := range starts {
			start(hook.Done())
		}
		return nil
	})
	return sync, err
}

// loopbackClient is a client of this server with the controllers'
// identity, for the caches every replica keeps.
func (c completedConfig) loopbackClient() (clientset.Interface, error) {
	loopback := c.GenericConfig.LoopbackClientConfig
	if loopback == nil {
		return nil, fmt.Errorf("no loopback client configuration")
	}
	cfg := rest.CopyConfig(loopback)
	if c.ExtraConfig.ControllerIdentity != nil {
		cfg = c.ExtraConfig.ControllerIdentity.ClientConfig(cfg)
	}
	client, err := clientset.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the loopback client: %w", err)
	}
	return client, nil
}

// installNodeTrust binds the standalone server's trust of node client
// certificates to a cache of CertificateAuthorities.
func (c completedConfig) installNodeTrust(s *Server) error {
	trust := c.ExtraConfig.NodeTrust
	if trust == nil {
		return nil
	}
	client, err := c.loopbackClient()
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	trust.Bind(factory.Rotation().V1alpha1().CertificateAuthorities().Lister())
	return s.GenericAPIServer.AddPostStartHook("rekey-node-trust", func(hook genericapiserver.PostStartHookContext) error {
		factory.Start(hook.Done())
		return nil
	})
}
