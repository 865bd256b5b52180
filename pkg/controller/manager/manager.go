// Package manager starts rekey's controllers on the elected leader: it
// creates the built-in CAs and signers, then runs the CA, signer, approver
// and cleaner controllers until leadership is lost.
package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/dynamic"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	clientv3 "go.etcd.io/etcd/client/v3"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/controller/approver"
	"rekey.io/rekey/pkg/controller/certificateauthority"
	"rekey.io/rekey/pkg/controller/cleaner"
	"rekey.io/rekey/pkg/controller/credential"
	"rekey.io/rekey/pkg/controller/publisher"
	"rekey.io/rekey/pkg/controller/signer"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	clientsetscheme "rekey.io/rekey/pkg/generated/clientset/versioned/scheme"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/issuer"
	"rekey.io/rekey/pkg/leaderelection"
	"rekey.io/rekey/pkg/policy"
	"rekey.io/rekey/pkg/quietlog"
	"rekey.io/rekey/pkg/signing/cabinding"
)

// Options is what the controllers need.
type Options struct {
	// KubeConfig reaches the host cluster (nil in standalone mode): trust
	// bundles are published there.
	KubeConfig *rest.Config
	// Authorizer answers the approver's SubjectAccessReviews.
	Authorizer authorizer.Authorizer
	KeyStores  *authority.KeyStores
	Etcd       *clientv3.Client
	// PrivatePrefix is the etcd prefix for keys, bindings, issuance records
	// and the leader election.
	PrivatePrefix string

	LeaderElect   bool
	LeaseDuration time.Duration
	Identity      string

	SignerWorkers   int
	CleanerInterval time.Duration
	// InsecureTestSigner creates the rekey.io/insecure-test built-in.
	InsecureTestSigner bool
}

// Manager runs the controllers and reports whether it can.
type Manager struct {
	opts Options

	mu  sync.Mutex
	err error
}

// PublishedOwnerAPIService is the APIService that owns the trust bundles
// rekey publishes into the host cluster.
const PublishedOwnerAPIService = "v1alpha1.rotation.rekey.io"

// New returns a manager that has not started.
func New(opts Options) *Manager { return &Manager{opts: opts} }

// Check is a readiness check: it fails while the controllers could not be
// started on this replica (a follower that waits for leadership is ready).
func (m *Manager) Check(*http.Request) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return fmt.Errorf("rekey controllers cannot run: %w", m.err)
	}
	return nil
}

func (m *Manager) report(err error) {
	m.mu.Lock()
	m.err = err
	m.mu.Unlock()
}

// Run runs the controllers (on the leader only, when LeaderElect) with a
// client for restConfig until ctx is done.
func (m *Manager) Run(ctx context.Context, restConfig *rest.Config) {
	if m.opts.Etcd == nil {
		m.report(errors.New("no etcd client for CA key bindings and issuance records"))
		return
	}
	run := func(ctx context.Context) error {
		err := m.runControllers(ctx, restConfig)
		m.report(err)
		return err
	}
	if !m.opts.LeaderElect {
		if err := run(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Controllers failed to start")
		}
		return
	}
	leaderelection.Run(ctx, leaderelection.Config{
		Client:        m.opts.Etcd,
		Key:           m.opts.PrivatePrefix + "/leader",
		Identity:      m.opts.Identity,
		LeaseDuration: m.opts.LeaseDuration,
		Run:           run,
	})
}

// runControllers starts every controller and returns when ctx is done, or
// at once with the reason they could not start.
func (m *Manager) runControllers(ctx context.Context, cfg *rest.Config) error {
	// Every call the controllers make, and their informers' lists and
	// watches, run with a logger that cannot dump a request or response
	// body at any -v: they read and write Secrets holding minted
	// credentials and ask for ServiceAccount tokens (package quietlog).
	ctx = quietlog.Context(ctx)
	logger := klog.FromContext(ctx)
	restConfig := rest.CopyConfig(cfg)
	// The controllers are the server's own clients: do not throttle them,
	// and do not compress what never leaves the process (as kube-apiserver
	// does for its loopback client). The generated clients speak protobuf.
	restConfig.QPS, restConfig.Burst = 5000, 10000
	restConfig.DisableCompression = true
	client, err := clientset.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("creating the controllers' client: %w", err)
	}
	if err := EnsureBuiltIns(ctx, client, m.opts.KubeConfig != nil, m.opts.InsecureTestSigner); err != nil {
		return fmt.Errorf("creating the built-in signers: %w", err)
	}
	opts := m.opts
	factory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute)
	// Each request controller watches only the requests it acts on (field
	// selectors): the approver the pending requests of the signers that
	// approve without a person, the signer the approved ones without a
	// certificate. A request issued in the write that approved it never
	// enters the signer's cache, a Manual signer's request never the
	// approver's, and no controller keeps the finished ones.
	approvedFactory := csrFactory(client, certv1alpha1.StateApproved)
	clk := clock.RealClock{}
	caInformer := factory.Rotation().V1alpha1().CertificateAuthorities()
	signerInformer := factory.Certificates().V1alpha1().Signers()

	authorities := authority.NewAuthorities(caInformer.Lister(), opts.KeyStores, cabinding.NewEtcdStore(opts.Etcd, opts.PrivatePrefix))
	recorder := issuance.NewRecorder(ctx, opts.Etcd, opts.PrivatePrefix)
	caController := certificateauthority.NewController(client, caInformer, authorities, recorder, clk)
	signerController := signer.NewController(client, approvedFactory.Certificates().V1alpha1().CertificateSigningRequests(), signerInformer, caInformer, authorities, recorder, clk)
	approverController := approver.NewController(client, signerInformer, opts.Authorizer, clk, TrimForCache)
	cleanerController := cleaner.NewController(client, clk, opts.CleanerInterval)
	// The leader prunes the issuance records of expired certificates.
	cleanerController.SetRecords(recorder)

	var publisherController *publisher.Controller
	var kubeFactory, defaultNamespace kubeinformers.SharedInformerFactory
	var kubeClient kubernetes.Interface
	if opts.KubeConfig != nil {
		kube, err := kubernetes.NewForConfig(opts.KubeConfig)
		if err != nil {
			return fmt.Errorf("creating the host cluster client: %w", err)
		}
		kubeClient = kube
		kubeFactory = kubeinformers.NewSharedInformerFactory(kubeClient, 10*time.Minute)
		defaultNamespace = kubeinformers.NewSharedInformerFactoryWithOptions(kubeClient, 10*time.Minute, kubeinformers.WithNamespace(corev1.NamespaceDefault))
		approverController.SetCluster(issuer.NewListerClusterView(kubeFactory, defaultNamespace))
		publisherController = publisher.NewController(kubeClient, caInformer, signerInformer, kubeFactory.Core().V1().Namespaces())
		dyn, err := dynamic.NewForConfig(opts.KubeConfig)
		if err != nil {
			return fmt.Errorf("creating the host cluster client: %w", err)
		}
		// Uninstalling rekey deletes this APIService; the garbage collector
		// then removes every bundle rekey published.
		publisherController.Owner = publisher.APIServiceOwner(dyn, PublishedOwnerAPIService)
		// Rotations show as events on the CA in the host cluster, so that
		// requesters learn early.
		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kubeClient.CoreV1().Events("")})
		defer broadcaster.Shutdown()
		recorder := broadcaster.NewRecorder(clientsetscheme.Scheme, corev1.EventSource{Component: "rekey-apiserver"})
		caController.SetEventRecorder(recorder)
		approverController.SetEventRecorder(recorder)
	}

	credential.RegisterMetrics()
	credentialController := credential.NewController(client, kubeClient, factory.Rotation().V1alpha1().RotatingCredentials(), caInformer, signerInformer, clk)

	for _, f := range []informers.SharedInformerFactory{factory, approvedFactory} {
		f.StartWithContext(ctx)
		defer f.Shutdown()
	}
	var wg sync.WaitGroup
	run := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	if publisherController != nil {
		kubeFactory.StartWithContext(ctx)
		defaultNamespace.StartWithContext(ctx)
		run(func() { publisherController.Run(ctx, 2) })
		defer kubeFactory.Shutdown()
		defer defaultNamespace.Shutdown()
	}
	run(func() { caController.Run(ctx, 2) })
	run(func() { signerController.Run(ctx, opts.SignerWorkers) })
	run(func() { approverController.Run(ctx, opts.SignerWorkers) })
	run(func() { cleanerController.Run(ctx) })
	run(func() { credentialController.Run(ctx, 16) })
	logger.Info("Controllers started", "signerWorkers", opts.SignerWorkers)
	<-ctx.Done()
	wg.Wait()
	logger.Info("Controllers stopped")
	return nil
}

// csrFactory is an informer factory for the requests in one state.
func csrFactory(client clientset.Interface, state string) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute, informers.WithTransform(TrimForCache),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector(certv1alpha1.StateField, state).String()
		}))
}

// TrimForCache drops what no controller reads from the objects the
// controllers cache: managed fields, often the larger part of a small
// object. (Which requests are cached at all is the field selector's job:
// only those a controller acts on, see csrFactory and the approver's
// informers.)
func TrimForCache(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// EnsureBuiltIns creates the built-in CAs and signers that do not exist
// yet. Existing ones are left as they are: an operator may have tuned them.
// hostCluster says Nodes can be read, so that kubelet serving requests can
// be approved against them (NodeServing).
func EnsureBuiltIns(ctx context.Context, client clientset.Interface, hostCluster, insecureTest bool) error {
	for _, b := range policy.BuiltIns(hostCluster, insecureTest) {
		ca := b.CA
		if _, err := client.RotationV1alpha1().CertificateAuthorities().Create(ctx, &ca, metav1.CreateOptions{FieldManager: "rekey-bootstrap"}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CertificateAuthority %s: %w", ca.Name, err)
		}
		s := b.Signer
		if _, err := client.CertificatesV1alpha1().Signers().Create(ctx, &s, metav1.CreateOptions{FieldManager: "rekey-bootstrap"}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating Signer %s: %w", s.Name, err)
		}
	}
	return nil
}
