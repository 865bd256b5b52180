package apiserver

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/attest/etcdstore"
	"rekey.io/rekey/pkg/authority"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	"rekey.io/rekey/pkg/issuer"
	"rekey.io/rekey/pkg/nodeattest"
	nodeattstorage "rekey.io/rekey/pkg/registry/attestation/nodeattestation"
	"rekey.io/rekey/pkg/trustpublish"
)

// newSynchronousIssuer builds, on every replica, the issuer that decides in
// the approval and create writes (nil when --synchronous-issuance=false).
// It signs through the server's one CA-key service and reads Signers from
// the replica's cache, a few objects, never one of requests; the cache
// starts once the server serves, and until it is complete every write is
// left to the controllers.
// attestor verifies the TPM evidence of Attestation-mode requests.
func (c completedConfig) newSynchronousIssuer(auth *authority.Service, factory informers.SharedInformerFactory, host *hostCluster, attestor issuer.Attestor) *issuer.Synchronous {
	if !c.ExtraConfig.SynchronousIssuance {
		return nil
	}
	signers := factory.Certificates().V1alpha1().Signers()
	cas := factory.Rotation().V1alpha1().CertificateAuthorities()
	// Looked up once: Synced runs on every synchronous decision, and each
	// Informer() call is a locked map lookup and an allocation.
	signersInformer, casInformer := signers.Informer(), cas.Informer()
	sync := &issuer.Synchronous{
		Signing:    auth.Signing,
		Signers:    signers.Lister(),
		Synced:     func() bool { return signersInformer.HasSynced() && casInformer.HasSynced() },
		Authorizer: c.GenericConfig.Authorization.Authorizer,
		Limiter:    issuer.NewRequesterLimiter(c.ExtraConfig.RequesterIssuanceBurst, c.ExtraConfig.RequesterIssuanceInterval, c.ExtraConfig.Clock),
		Attestor:   attestor,
	}
	if host != nil {
		// NodeServing approval in the create reads the host cluster's
		// Nodes and Services.
		sync.Cluster = host.cluster
	}
	return sync
}

// hostCluster is the server's one set of host-cluster clients and its one
// cache of Nodes and Services (NodeServing approval, in the request path
// and in the approver); nil in standalone mode.
type hostCluster struct {
	kube    kubernetes.Interface
	cluster issuer.ClusterView
	// published collects what rekey's publishers wrote into the host
	// cluster (ConfigMaps, ClusterTrustBundles, APIService caBundles),
	// for the rotation's trust gate.
	published *trustpublish.Tracker
}

// newHostCluster makes the host cluster's clients and caches; the caches
// start once the server serves.
func (c completedConfig) newHostCluster(s *Server) (*hostCluster, error) {
	if c.ExtraConfig.KubeConfig == nil {
		return nil, nil
	}
	kube, err := kubernetes.NewForConfig(c.ExtraConfig.KubeConfig)
	if err != nil {
		return nil, fmt.Errorf("creating the host cluster client: %w", err)
	}
	all := kubeinformers.NewSharedInformerFactory(kube, 10*time.Minute)
	inDefault := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 10*time.Minute, kubeinformers.WithNamespace(corev1.NamespaceDefault))
	h := &hostCluster{kube: kube, cluster: issuer.NewListerClusterView(all, inDefault), published: trustpublish.New()}
	err = s.GenericAPIServer.AddPostStartHook("rekey-host-cluster-informers", func(hook genericapiserver.PostStartHookContext) error {
		all.Start(hook.Done())
		inDefault.Start(hook.Done())
		return nil
	})
	return h, err
}

// newNodeAttestations builds, on every replica, the NodeAttestation
// storage and the server side of TPM attestation: the challenge
// subresource and the Attestation approval mode read AttestationPolicies
// from the replica's cache and keep challenges, attempts and EK bindings
// under the private prefix, and write NodeAttestation status through the
// storage's writer.
func (c completedConfig) newNodeAttestations(s *Server, factory informers.SharedInformerFactory) (*nodeattstorage.Storage, *nodeattest.Service, error) {
	policies := factory.Attestation().V1alpha1().AttestationPolicies()
	var service *nodeattest.Service
	storage, err := nodeattstorage.NewStorage(Scheme, c.GenericConfig.RESTOptionsGetter, func(nodes *nodeattstorage.StatusWriter) nodeattstorage.Challenger {
		service = &nodeattest.Service{
			Policies:           policies.Lister(),
			Synced:             policies.Informer().HasSynced,
			Store:              etcdstore.New(s.etcd, c.ExtraConfig.Etcd.PrivatePrefix),
			Nodes:              nodes,
			Clock:              c.ExtraConfig.Clock,
			InsecureTestSigner: c.ExtraConfig.Controllers.InsecureTestSigner,
			Authorizer:         c.GenericConfig.Authorization.Authorizer,
		}
		return service
	}, c.ExtraConfig.Clock)
	if err != nil {
		return nil, nil, fmt.Errorf("creating nodeattestations storage: %w", err)
	}
	if c.ExtraConfig.Controllers.InsecureTestSigner {
		// Every replica approves for it (in the create), so every replica
		// says so, once, where an operator reading the start will see it.
		err = s.GenericAPIServer.AddPostStartHook("rekey-insecure-test-signer-warning", func(hook genericapiserver.PostStartHookContext) error {
			klog.FromContext(hook).Info("WARNING: --enable-insecure-test-signer is set: the rekey.io/insecure-test signer approves and signs every node client request without verifying anything (no TPM, no review); development only",
				"signerName", nodeattest.InsecureTestSignerName)
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("adding the insecure test signer warning: %w", err)
		}
	}
	return storage, service, nil
}

// newReplicaInformers is the one cache of rekey's own objects that every
// replica keeps: the synchronous issuer's Signers, the CA-key service's
// CertificateAuthorities, the standalone node trust's CAs, and the same
// CA and Signer informers lent to the controllers on the leader (the
// informers the callers ask for before the server starts are the ones it
// runs), started once the server serves.
func (c completedConfig) newReplicaInformers(s *Server) (informers.SharedInformerFactory, error) {
	cfg, err := c.controllersClientConfig()
	if err != nil {
		return nil, err
	}
	client, err := clientset.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the loopback client: %w", err)
	}
	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	// The CA and Signer informers exist whatever is configured: the
	// CA-key service and the controllers need them, and a factory starts
	// only the informers asked for before its Start (one made later, in a
	// leadership term, would never run).
	factory.Rotation().V1alpha1().CertificateAuthorities().Informer()
	factory.Certificates().V1alpha1().Signers().Informer()
	err = s.GenericAPIServer.AddPostStartHook("rekey-replica-informers", func(hook genericapiserver.PostStartHookContext) error {
		factory.Start(hook.Done())
		return nil
	})
	return factory, err
}

// installNodeTrust binds the standalone server's trust of node client
// certificates to the replica's cache of CertificateAuthorities.
func (c completedConfig) installNodeTrust(factory informers.SharedInformerFactory) {
	if trust := c.ExtraConfig.NodeTrust; trust != nil {
		trust.Bind(factory.Rotation().V1alpha1().CertificateAuthorities().Lister())
	}
}
