// Package apiserver assembles rekey's API server from a generic API server
// configuration: Config -> CompletedConfig -> Server.
package apiserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	restclient "k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	clientv3 "go.etcd.io/etcd/client/v3"

	"rekey.io/rekey/pkg/admission/rekeyinit"
	"rekey.io/rekey/pkg/apis/attestation"
	attestationinstall "rekey.io/rekey/pkg/apis/attestation/install"
	attestationv1alpha1 "rekey.io/rekey/pkg/apis/attestation/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates"
	certinstall "rekey.io/rekey/pkg/apis/certificates/install"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/rotation"
	rotationinstall "rekey.io/rekey/pkg/apis/rotation/install"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/apiserver/decodeerrors"
	"rekey.io/rekey/pkg/apiserver/publicpaths"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/controller/manager"
	"rekey.io/rekey/pkg/crl"
	"rekey.io/rekey/pkg/issuance"
	policystorage "rekey.io/rekey/pkg/registry/attestation/attestationpolicy"
	nodeattstorage "rekey.io/rekey/pkg/registry/attestation/nodeattestation"
	csrstorage "rekey.io/rekey/pkg/registry/certificates/certificatesigningrequest"
	signerstorage "rekey.io/rekey/pkg/registry/certificates/signer"
	castorage "rekey.io/rekey/pkg/registry/rotation/certificateauthority"
	credstorage "rekey.io/rekey/pkg/registry/rotation/rotatingcredential"
	tcstorage "rekey.io/rekey/pkg/registry/rotation/trustconsumer"
	"rekey.io/rekey/pkg/revocation"
	"rekey.io/rekey/pkg/serveridentity"
	"rekey.io/rekey/pkg/servingcert"
	"rekey.io/rekey/pkg/signing/cabinding"
	"rekey.io/rekey/pkg/signing/keystorepaths"
	"rekey.io/rekey/pkg/standalone"
)

var (
	// Scheme holds every type rekey serves.
	Scheme = runtime.NewScheme()
	// Codecs encodes and decodes them.
	Codecs = serializer.NewCodecFactory(Scheme)
)

func init() {
	certinstall.Install(Scheme)
	rotationinstall.Install(Scheme)
	attestationinstall.Install(Scheme)

	// Options such as ListOptions and DeleteOptions are registered unversioned
	// so that every group can use them.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{},
		&metav1.APIVersions{},
		&metav1.APIGroupList{},
		&metav1.APIGroup{},
		&metav1.APIResourceList{},
	)
}

// ExtraConfig holds rekey's own configuration: everything New needs beyond
// the generic server. Options fill it (pkg/cmd/server); New builds from it.
type ExtraConfig struct {
	// Clock stamps condition times; nil means the real clock.
	Clock clock.PassiveClock
	// ControllerIdentity is the identity the controllers' client carries;
	// only it may write CertificateAuthority and Signer status.
	ControllerIdentity *serveridentity.Identity

	// Etcd is where the private data (CA keys, bindings, issuance records,
	// the leader election) lives: the same etcd as the API objects.
	Etcd EtcdConfig
	// KeyStores configures where CA keys may live.
	KeyStores KeyStoresConfig
	// Controllers configures the controllers that run on the leader.
	Controllers manager.Options
	// SynchronousIssuance decides approvals' certificates, and NodeClient
	// approvals, in the API writes themselves, on every replica.
	SynchronousIssuance bool
	// RequesterIssuanceBurst and RequesterIssuanceInterval bound, per
	// requester and per replica, the creates decided at create: a burst,
	// then one more per interval (burst 0: no limit).
	RequesterIssuanceBurst    int
	RequesterIssuanceInterval time.Duration

	// ServingCA, when set, serves rekey with a certificate from a CA it
	// manages.
	ServingCA *servingcert.Config

	// KubeConfig reaches the host cluster (--kubeconfig); nil in standalone
	// mode.
	KubeConfig *restclient.Config

	// CertificateAuthorities is the getter the admission plugins were given;
	// New binds it to the storage it makes. This is the one binding left
	// after construction, and it cannot be construction order: the generic
	// server builds the admission chain while the configuration is applied
	// (RecommendedOptions.ApplyTo, before Complete), and the storage needs
	// the completed configuration's RESTOptionsGetter. The plugins read
	// through storage, not a cache, because the rotate checks must see the
	// phase as stored, not as an informer last saw it.
	CertificateAuthorities *rekeyinit.LateGetter
	// RotatingCredentials is the same for RotatingCredentials.
	RotatingCredentials *rekeyinit.LateCredentialGetter
	// Signers is the same for Signers (read from the watch cache).
	Signers *rekeyinit.LateSignerGetter

	// NodeTrust, in standalone mode, authenticates nodes with the client
	// certificates of rekey's own kubelet client CA.
	NodeTrust *standalone.NodeTrust
	// SelfReviews, in standalone mode, is the authorizer that answers
	// SelfSubjectAccessReviews, and turns on serving them and
	// SelfSubjectReviews (kubectl auth can-i, kubectl auth whoami). Nil:
	// neither is served (in a cluster, kube-apiserver serves both).
	SelfReviews authorizer.Authorizer

	// PublicPaths is where New registers the handlers served without
	// authentication (the revocation webhook, the CRLs): the options put it
	// in front of the generic handler chain. Nil: none are served.
	PublicPaths *publicpaths.Mux
	// Revocations is the revoked set the options wrapped the authenticator
	// with; New fills it from the replica's informer and serves the
	// revocation webhook from it. Nil: neither.
	Revocations *revocation.Set
	// CRLValidity is nextUpdate minus the issue time of the CRLs
	// (--crl-validity); zero is the package's default.
	CRLValidity time.Duration

	// PostStartHooks are extra hooks by name (standalone mode writes its
	// admin kubeconfig in one).
	PostStartHooks map[string]genericapiserver.PostStartHookFunc
}

// KeyStoresConfig says where CA keys may live.
type KeyStoresConfig struct {
	// KEKFile holds the key-encryption key of the Etcd key store, unless
	// KEKSecret names a Secret of the host cluster that does (created with
	// a random key when missing).
	KEKFile   string
	KEKSecret types.NamespacedName
	// Allowed are the PKCS#11 modules and key-store directories a
	// CertificateAuthority may name.
	Allowed keystorepaths.Allowed
}

// Config is the generic configuration plus rekey's own.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	ExtraConfig   ExtraConfig
}

type completedConfig struct {
	GenericConfig genericapiserver.CompletedConfig
	ExtraConfig   *ExtraConfig
}

// CompletedConfig is a Config whose defaults have been filled in.
type CompletedConfig struct {
	*completedConfig
}

// Server is rekey's API server and what it owns besides the generic server:
// the embedded etcd (standalone) and the etcd client of the private data.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
	// Controllers is the controller manager, started by a post-start hook.
	Controllers *manager.Manager

	embedded *standalone.Etcd
	etcd     *clientv3.Client
	// crls issues and serves the CAs' CRLs on every replica; the
	// publisher on the leader puts them into ConfigMaps. Nil without
	// public paths.
	crls *crl.Manager
	// background are the workers started by post-start hooks (controllers,
	// serving CA); Run waits for them before closing etcd.
	background sync.WaitGroup
	// requests is the context of what serves requests (the synchronous
	// issuer's recorder): it outlives the signal context, which ends
	// when the shutdown begins, until the requests in flight have been
	// answered, so that an issuance in flight at SIGTERM is recorded and
	// stored, not failed after a wait. close ends it.
	requests    context.Context
	endRequests context.CancelFunc
}

// Complete fills in defaults.
func (cfg *Config) Complete() CompletedConfig {
	c := completedConfig{
		GenericConfig: cfg.GenericConfig.Complete(),
		ExtraConfig:   &cfg.ExtraConfig,
	}
	if c.ExtraConfig.Clock == nil {
		c.ExtraConfig.Clock = clock.RealClock{}
	}
	return CompletedConfig{&c}
}

// New assembles the server: the private etcd client and key stores (a wrong key-encryption key fails here, before
// anything is served or written), the generic server, rekey's API groups,
// and the controllers' post-start hook and readiness check.
func (c completedConfig) New(ctx context.Context) (_ *Server, err error) {
	s := &Server{embedded: c.ExtraConfig.Etcd.Embedded}
	s.requests, s.endRequests = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			s.close(klog.FromContext(ctx))
		}
	}()
	if s.embedded != nil {
		// The embedded etcd is in this process: call it directly (closed
		// with it).
		s.etcd = s.embedded.InProcess().Client()
	} else if s.etcd, err = newEtcdClient(c.ExtraConfig.Etcd.Transport); err != nil {
		return nil, err
	}
	etcdKeys, err := newEtcdKeyStore(ctx, s.etcd, c.ExtraConfig.Etcd.PrivatePrefix, c.ExtraConfig.KeyStores, c.ExtraConfig.KubeConfig)
	if err != nil {
		return nil, err
	}
	keyStores := &authority.KeyStores{Etcd: etcdKeys, Allowed: c.ExtraConfig.KeyStores.Allowed}

	generic, err := c.GenericConfig.New("rekey-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("creating generic API server: %w", err)
	}
	s.GenericAPIServer = generic
	// What the request path, the controllers and the serving-certificate
	// manager share is made here, once, in the order each needs the other.
	replica, err := c.newReplicaInformers(s)
	if err != nil {
		return nil, err
	}
	if err := c.installRevocationEnforcement(s, replica); err != nil {
		return nil, err
	}
	prefix := c.ExtraConfig.Etcd.PrivatePrefix
	auth := authority.NewService(authority.Config{
		Stores:   keyStores,
		Bindings: cabinding.NewEtcdStore(s.etcd, prefix),
		CAs:      replica.Rotation().V1alpha1().CertificateAuthorities().Lister(),
		// Not ctx: it ends when the shutdown begins, while the requests in
		// flight and the stopping controllers still record what they
		// issue; s.requests ends once they are done (close).
		Records: issuance.NewRecorder(s.requests, s.etcd, prefix),
		Clock:   c.ExtraConfig.Clock,
	})
	host, err := c.newHostCluster(s)
	if err != nil {
		return nil, err
	}
	nodeAttestations, nodeAttest, err := c.newNodeAttestations(s, replica)
	if err != nil {
		return nil, err
	}
	var inWrites csrstorage.Issuer
	if sync := c.newSynchronousIssuer(auth, replica, host, nodeAttest); sync != nil {
		inWrites = sync
	}
	revocations, err := c.newRevocations(auth.Records)
	if err != nil {
		return nil, err
	}
	if err := c.installAPIGroups(generic, inWrites, nodeAttestations, revocations, auth.Authorities); err != nil {
		return nil, err
	}
	c.installNodeTrust(replica)
	if c.ExtraConfig.SelfReviews != nil {
		if err := standalone.InstallSelfReviews(generic.Handler.NonGoRestfulMux, c.ExtraConfig.SelfReviews); err != nil {
			return nil, err
		}
	}
	if s.crls, err = c.installCRLs(s, auth, replica); err != nil {
		return nil, err
	}
	if err := c.installControllers(s, auth, replica, host); err != nil {
		return nil, err
	}
	if err := c.installServingCA(s, auth, replica, host); err != nil {
		return nil, err
	}
	for name, hook := range c.ExtraConfig.PostStartHooks {
		if err := generic.AddPostStartHook(name, hook); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Shutdown timings, fitted to the kubelet's default grace period of 30 s
// between SIGTERM and SIGKILL (artifacts/deploy sets it explicitly).
const (
	// WatchTerminationGracePeriod bounds the wait for open watches to end
	// once they are told to (they normally end at once).
	WatchTerminationGracePeriod = 5 * time.Second
	// ShutdownTimeout bounds the whole shutdown after SIGTERM: past it, the
	// requests still running are abandoned and etcd is closed anyway, so
	// that the process always exits, and closes etcd, before the SIGKILL.
	ShutdownTimeout = 20 * time.Second
	// controllersStopTimeout bounds the wait for the controllers (and the
	// leader election's resignation) once the HTTP server has stopped.
	controllersStopTimeout = 5 * time.Second
)

// Run serves until ctx is done, then shuts down within ShutdownTimeout:
// the generic server ends watches and waits for the other requests, the
// controllers stop (their context ends when the HTTP server stops) and
// resign leadership, then etcd is closed, the embedded one last. Only then
// does Run return (nil after a clean shutdown).
func (s *Server) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	served := make(chan error, 1)
	prepared := s.GenericAPIServer.PrepareRun()
	go func() { served <- prepared.RunWithContext(ctx) }()
	var err error
	var deadline <-chan time.Time
	select {
	case err = <-served:
		if ctx.Err() == nil {
			// Serving failed on its own (the port, say): nothing to drain.
			s.close(logger)
			return err
		}
	case <-ctx.Done():
		logger.Info("Shutting down: ending watches, waiting for requests in flight", "timeout", ShutdownTimeout)
		timer := time.NewTimer(ShutdownTimeout)
		defer timer.Stop()
		deadline = timer.C
		select {
		case err = <-served:
		case <-deadline:
			err = fmt.Errorf("requests still running %s after the shutdown began; closing etcd under them", ShutdownTimeout)
			logger.Error(err, "Shutdown timed out")
		}
	}
	stopped := make(chan struct{})
	go func() { s.background.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(controllersStopTimeout):
		logger.Error(nil, "The controllers did not stop in time; closing etcd under them", "waited", controllersStopTimeout)
	case <-deadline:
		logger.Error(nil, "The controllers did not stop before the shutdown deadline; closing etcd under them")
	}
	s.close(logger)
	return err
}

// goBackground runs f as one of the server's background workers, which
// Run waits for (bounded) before closing etcd.
func (s *Server) goBackground(f func()) {
	s.background.Add(1)
	go func() {
		defer s.background.Done()
		f()
	}()
}

func (s *Server) close(logger klog.Logger) {
	s.endRequests()
	if s.embedded != nil {
		// Close returns once etcd has stopped its raft loop and closed its
		// WAL and database: the next start needs no recovery.
		s.embedded.Close()
		logger.Info("Embedded etcd closed")
	} else if s.etcd != nil {
		_ = s.etcd.Close()
		logger.Info("Etcd client closed")
	}
}

// installAPIGroups installs certificates.rekey.io, rotation.rekey.io and
// attestation.rekey.io.
// sync, when not nil, decides in the request path (package issuer).
// nodeAttestations is the NodeAttestation storage, made with the service
// that answers its challenges (newNodeAttestations); revocations the
// Revocation storage (newRevocations); caKeys the server's one cache of CA
// keys, which certificateauthorities/NAME/signjwt signs with.
func (c completedConfig) installAPIGroups(generic *genericapiserver.GenericAPIServer, sync csrstorage.Issuer, nodeAttestations *nodeattstorage.Storage, revocations rest.Storage, caKeys castorage.CAKeys) error {
	group := genericapiserver.NewDefaultAPIGroupInfo(certificates.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	group.NegotiatedSerializer = decodeerrors.Wrap(Codecs, Scheme) // name the field of a value that does not decode
	csr, err := csrstorage.NewStorage(Scheme, c.GenericConfig.RESTOptionsGetter, c.ExtraConfig.Clock, sync)
	if err != nil {
		return fmt.Errorf("creating certificatesigningrequests storage: %w", err)
	}
	signers, signersStatus, err := signerstorage.NewStorage(Scheme, c.GenericConfig.RESTOptionsGetter)
	if err != nil {
		return fmt.Errorf("creating signers storage: %w", err)
	}
	csr.UseSigners(signers)
	if c.ExtraConfig.Signers != nil {
		c.ExtraConfig.Signers.Bind(signers)
	}
	group.VersionedResourcesStorageMap[certv1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"certificatesigningrequests":          csr.CertificateSigningRequest,
		"certificatesigningrequests/status":   csr.Status,
		"certificatesigningrequests/approval": csr.Approval,
		"signers":                             signers,
		"signers/status":                      signersStatus,
		"revocations":                         revocations,
	}
	if csr.SelfNodeClient != nil {
		group.VersionedResourcesStorageMap[certv1alpha1.SchemeGroupVersion.Version]["certificatesigningrequests/selfnodeclient"] = csr.SelfNodeClient
		group.VersionedResourcesStorageMap[certv1alpha1.SchemeGroupVersion.Version]["certificatesigningrequests/nodeclient"] = csr.NodeClient
	}
	if err := generic.InstallAPIGroup(&group); err != nil {
		return fmt.Errorf("installing %s: %w", certificates.GroupName, err)
	}

	rotationGroup := genericapiserver.NewDefaultAPIGroupInfo(rotation.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	rotationGroup.NegotiatedSerializer = decodeerrors.Wrap(Codecs, Scheme) // name the field of a value that does not decode
	cas, err := castorage.NewStorage(Scheme, c.GenericConfig.RESTOptionsGetter, c.ExtraConfig.KeyStores.Allowed, c.ExtraConfig.Clock)
	if err != nil {
		return fmt.Errorf("creating certificateauthorities storage: %w", err)
	}
	if c.ExtraConfig.CertificateAuthorities != nil {
		c.ExtraConfig.CertificateAuthorities.Bind(cas.CertificateAuthority)
	}
	creds, err := credstorage.NewStorage(Scheme, c.GenericConfig.RESTOptionsGetter, c.ExtraConfig.Clock)
	if err != nil {
		return fmt.Errorf("creating rotatingcredentials storage: %w", err)
	}
	if c.ExtraConfig.RotatingCredentials != nil {
		c.ExtraConfig.RotatingCredentials.Bind(creds.RotatingCredential)
	}
	consumers, err := tcstorage.NewStorage(Scheme, c.GenericConfig.RESTOptionsGetter, c.ExtraConfig.Clock)
	if err != nil {
		return fmt.Errorf("creating trustconsumers storage: %w", err)
	}
	rotationGroup.VersionedResourcesStorageMap[rotationv1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"certificateauthorities":        cas.CertificateAuthority,
		"certificateauthorities/status": cas.Status,
		"certificateauthorities/rotate": cas.Rotate,
		"rotatingcredentials":           creds.RotatingCredential,
		"rotatingcredentials/status":    creds.Status,
		"rotatingcredentials/rotate":    creds.Rotate,
		"trustconsumers":                consumers.TrustConsumer,
		"trustconsumers/status":         consumers.Status,
	}
	// signjwt reads the CA from storage and signs with the key its binding
	// names (caKeys), never one read from status.
	rotationGroup.VersionedResourcesStorageMap[rotationv1alpha1.SchemeGroupVersion.Version]["certificateauthorities/signjwt"] =
		castorage.NewSignJWTREST(cas.CertificateAuthority, caKeys, c.ExtraConfig.Clock)
	if err := generic.InstallAPIGroup(&rotationGroup); err != nil {
		return fmt.Errorf("installing %s: %w", rotation.GroupName, err)
	}

	attestationGroup := genericapiserver.NewDefaultAPIGroupInfo(attestation.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	attestationGroup.NegotiatedSerializer = decodeerrors.Wrap(Codecs, Scheme) // name the field of a value that does not decode
	policies, err := policystorage.NewStorage(Scheme, c.GenericConfig.RESTOptionsGetter)
	if err != nil {
		return fmt.Errorf("creating attestationpolicies storage: %w", err)
	}
	attestationGroup.VersionedResourcesStorageMap[attestationv1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"attestationpolicies":        policies,
		"nodeattestations":           nodeAttestations.NodeAttestation,
		"nodeattestations/status":    nodeAttestations.Status,
		"nodeattestations/challenge": nodeAttestations.Challenge,
	}
	if err := generic.InstallAPIGroup(&attestationGroup); err != nil {
		return fmt.Errorf("installing %s: %w", attestation.GroupName, err)
	}
	return nil
}
