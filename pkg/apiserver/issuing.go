package apiserver

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rekey.io/rekey/pkg/attest/etcdstore"

	"rekey.io/rekey/pkg/authority"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/issuer"
	"rekey.io/rekey/pkg/nodeattest"
	"rekey.io/rekey/pkg/signing/cabinding"
)

// newSynchronousIssuer builds, on every replica, the issuer that decides in
// the approval and create writes (nil when --synchronous-issuance=false).
// It keeps its own cache of Signers and CertificateAuthorities, a few
// objects, and never one of requests; the cache starts once the server
// serves, and until it is complete every write is left to the controllers.
func (c completedConfig) newSynchronousIssuer(s *Server, keyStores *authority.KeyStores, factory informers.SharedInformerFactory) (*issuer.Synchronous, error) {
	if !c.ExtraConfig.SynchronousIssuance {
		return nil, nil
	}
	signers := factory.Certificates().V1alpha1().Signers()
	cas := factory.Rotation().V1alpha1().CertificateAuthorities()
	// Looked up once: Synced runs on every synchronous decision, and each
	// Informer() call is a locked map lookup and an allocation.
	signersInformer, casInformer := signers.Informer(), cas.Informer()
	prefix := c.ExtraConfig.Etcd.PrivatePrefix
	sync := &issuer.Synchronous{
		Signing: &authority.Signing{
			Authorities: authority.NewAuthorities(cas.Lister(), keyStores, cabinding.NewEtcdStore(s.etcd, prefix)),
			// Not ctx: it ends when the shutdown begins, while the
			// requests in flight still record what they issue.
			Recorder: issuance.NewRecorder(s.requests, s.etcd, prefix),
			Clock:    c.ExtraConfig.Clock,
		},
		Signers:    signers.Lister(),
		Synced:     func() bool { return signersInformer.HasSynced() && casInformer.HasSynced() },
		Authorizer: c.GenericConfig.Authorization.Authorizer,
		Limiter:    issuer.NewRequesterLimiter(c.ExtraConfig.RequesterIssuanceBurst, c.ExtraConfig.RequesterIssuanceInterval, c.ExtraConfig.Clock),
	}
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
		err = s.GenericAPIServer.AddPostStartHook("rekey-synchronous-issuer-host-cluster", func(hook genericapiserver.PostStartHookContext) error {
			all.Start(hook.Done())
			inDefault.Start(hook.Done())
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return sync, nil
}

// newNodeAttestation builds, on every replica, the server side of TPM
// attestation: the challenge subresource and the Attestation approval mode
// read AttestationPolicies from the replica's cache and keep challenges,
// attempts and EK bindings under the private prefix.
func (c completedConfig) newNodeAttestation(s *Server, factory informers.SharedInformerFactory) *nodeattest.Service {
	policies := factory.Attestation().V1alpha1().AttestationPolicies()
	return &nodeattest.Service{
		Policies:           policies.Lister(),
		Synced:             policies.Informer().HasSynced,
		Store:              etcdstore.New(s.etcd, c.ExtraConfig.Etcd.PrivatePrefix),
		Clock:              c.ExtraConfig.Clock,
		InsecureTestSigner: c.ExtraConfig.Controllers.InsecureTestSigner,
		Authorizer:         c.GenericConfig.Authorization.Authorizer,
	}
}

// newReplicaInformers is the one cache of rekey's own objects that every
// replica keeps for the request path (the synchronous issuer's Signers and
// CertificateAuthorities, the standalone node trust's CAs; the informers
// the callers ask for before the server starts are the ones it runs),
// started once the server serves.
func (c completedConfig) newReplicaInformers(s *Server) (informers.SharedInformerFactory, error) {
	client, err := c.loopbackClient()
	if err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	err = s.GenericAPIServer.AddPostStartHook("rekey-replica-informers", func(hook genericapiserver.PostStartHookContext) error {
		factory.Start(hook.Done())
		return nil
	})
	return factory, err
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
// certificates to the replica's cache of CertificateAuthorities.
func (c completedConfig) installNodeTrust(factory informers.SharedInformerFactory) {
	if trust := c.ExtraConfig.NodeTrust; trust != nil {
		trust.Bind(factory.Rotation().V1alpha1().CertificateAuthorities().Lister())
	}
}
