// Package manager runs rekey's controllers on the elected leader (etcd
// leader election under the private prefix, or every replica when leader
// election is off). Each leadership term creates the built-in CAs and
// signers, then runs the CertificateAuthority, signer, approver, cleaner,
// revocation and RotatingCredential controllers and, with a host cluster, the
// publisher of trust bundles and the approver and signer of the host
// cluster's own CSRs (hostcsr), until leadership is lost. The CA and Signer
// informers and the CA-key service (pkg/authority) are the server's, shared
// with the request path: a term borrows the informers and removes the
// handlers it added when it ends.
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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/dynamic"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
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
	"rekey.io/rekey/pkg/controller/csrevents"
	"rekey.io/rekey/pkg/controller/hostcsr"
	"rekey.io/rekey/pkg/controller/podcert"
	"rekey.io/rekey/pkg/controller/publisher"
	"rekey.io/rekey/pkg/controller/revocation"
	"rekey.io/rekey/pkg/controller/signer"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	clientsetscheme "rekey.io/rekey/pkg/generated/clientset/versioned/scheme"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	certinformers "rekey.io/rekey/pkg/generated/informers/externalversions/certificates/v1alpha1"
	rotationinformers "rekey.io/rekey/pkg/generated/informers/externalversions/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuer"
	"rekey.io/rekey/pkg/leaderelection"
	"rekey.io/rekey/pkg/policy"
	"rekey.io/rekey/pkg/quietlog"
	"rekey.io/rekey/pkg/trustpublish"
)

// Options are the controllers' settings, from flags.
type Options struct {
	LeaderElect   bool
	LeaseDuration time.Duration
	Identity      string

	SignerWorkers   int
	CleanerInterval time.Duration
	// InsecureTestSigner creates the rekey.io/insecure-test built-in.
	InsecureTestSigner bool
}

// Deps is what the controllers are built from. The server makes each
// once and shares it (the CA and Signer informers, the CA-key service and
// the host cluster's Node and Service caches are the same ones the request
// path reads); the manager starts none of the shared ones.
type Deps struct {
	// Client reaches this server with the controllers' own identity (the
	// only writer of CA and Signer status), unthrottled.
	Client clientset.Interface
	// Kube reaches the host cluster; nil in standalone mode. Rotations
	// are recorded there as events, and the RotatingCredential controller
	// writes Secrets there.
	Kube kubernetes.Interface
	// PublisherKube and PublisherAPIServices are the publisher's host
	// cluster clients (its own user agent): it writes trust bundles and
	// reads the APIService that owns them. Nil in standalone mode.
	PublisherKube        kubernetes.Interface
	PublisherAPIServices dynamic.Interface
	// Cluster reads the host cluster's Nodes and Services for NodeServing
	// approval; nil without a host cluster.
	Cluster issuer.ClusterView
	// Authorizer answers the approver's SubjectAccessReviews.
	Authorizer authorizer.Authorizer
	// Authority holds the CA keys, the bindings and the issuance records.
	Authority *authority.Service
	// CAs and Signers are the server's one informer on each, started by
	// the server. Each leadership term adds its handlers and removes them
	// when it ends.
	CAs     rotationinformers.CertificateAuthorityInformer
	Signers certinformers.SignerInformer
	// Revocations is the server's informer on Revocations (every replica
	// keeps the revoked set from it), borrowed as CAs; nil: the term
	// watches them itself.
	Revocations certinformers.RevocationInformer
	// Etcd holds the leader election under PrivatePrefix.
	Etcd          *clientv3.Client
	PrivatePrefix string
	// Fence, with LeaderElect, is the election's fence: it leads only
	// while this replica's lease deadline has not passed. The server wraps
	// the transports of Client, Kube and the publisher's clients with it,
	// so that a replica stopped past its lease and resumed refuses their
	// writes from its lease deadline on, as they are sent (what it does not
	// cover: leaderelection.Fence); the controllers' direct etcd writes
	// check it through their context (leaderelection.CheckContext), so
	// they must use the term's context. Nil: the election keeps a
	// fence of its own, which only the work context carries.
	Fence *leaderelection.Fence
	// Clock is the controllers' clock.
	Clock clock.Clock
	// Published holds what rekey's own publishers wrote (the publisher
	// here, the serving certificate manager on every replica): a
	// rotation's new key signs only once they wrote it everywhere.
	Published *trustpublish.Tracker
	// CRLs are the server's CRLs (package crl), which the publisher puts
	// into the CAs' ConfigMaps as ca.crl and ca-crl.pem; nil for none.
	CRLs publisher.CRLSource
}

// Manager runs the controllers and reports whether it can.
type Manager struct {
	opts Options
	deps Deps

	mu  sync.Mutex
	err error
}

// PublishedOwnerAPIService is the APIService that owns the trust bundles
// rekey publishes into the host cluster.
const PublishedOwnerAPIService = "v1alpha1.rotation.rekey.io"

// New returns a manager that has not started.
func New(opts Options, deps Deps) (*Manager, error) {
	if opts.LeaderElect && deps.Etcd == nil {
		return nil, errors.New("leader election needs the etcd client of the private data")
	}
	if deps.Client == nil || deps.Authority == nil || deps.CAs == nil || deps.Signers == nil || deps.Clock == nil {
		return nil, errors.New("the controllers need a client, the CA-key service, the CA and Signer informers and a clock")
	}
	return &Manager{opts: opts, deps: deps}, nil
}

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

// Run runs the controllers (on the leader only, when LeaderElect) until
// ctx is done.
func (m *Manager) Run(ctx context.Context) {
	run := func(ctx context.Context) error {
		err := m.runControllers(ctx)
		if m.termEnded(ctx, err) {
			// The term ended (the lease lapsed, or shutdown) while the
			// controllers started or ran: whatever failed with it says
			// nothing about whether this replica can run them, and a
			// follower must not stay unready until it next leads.
			m.report(nil)
			return nil
		}
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
		Client:        m.deps.Etcd,
		Key:           m.deps.PrivatePrefix + "/leader",
		Identity:      m.opts.Identity,
		LeaseDuration: m.opts.LeaseDuration,
		Run:           run,
		Fence:         m.deps.Fence,
	})
}

// termEnded says whether the term of ctx is over, so that err (the term's
// outcome) is not the replica's. The fence says so first: from the lease
// deadline on it refuses the term's writes (ErrNotLeading) and no longer
// leads, while the work context is cancelled only once the election's
// goroutines have noticed, which after a SIGSTOP may come after the
// controllers' own failure. A real failure that happens to coincide with
// the end of the term is then reported ready; the next term reports it.
func (m *Manager) termEnded(ctx context.Context, err error) bool {
	// Both fences are nil-safe (nil leads): without leader election
	// neither is set; with it, ctx carries the election's fence, which is
	// Deps.Fence when the server set one.
	return ctx.Err() != nil || errors.Is(err, leaderelection.ErrNotLeading) ||
		!leaderelection.FromContext(ctx).Leading() || !m.deps.Fence.Leading()
}

// runControllers runs one leadership term: it builds the controllers,
// starts them and returns when ctx is done, or at once with the reason
// they could not start.
func (m *Manager) runControllers(ctx context.Context) error {
	// Every call the controllers make, and their informers' lists and
	// watches, run with a logger that cannot dump a request or response
	// body at any -v: they read and write Secrets holding minted
	// credentials and ask for ServiceAccount tokens (package quietlog).
	ctx = quietlog.Context(ctx)
	logger := klog.FromContext(ctx)
	opts, deps := m.opts, m.deps
	client := deps.Client
	if err := m.ensureBuiltIns(ctx, client, deps.Kube != nil, opts.InsecureTestSigner); err != nil {
		return fmt.Errorf("creating the built-in signers: %w", err)
	}
	// This term can run the controllers: what an earlier term (or this
	// one's retries) failed with no longer holds.
	m.report(nil)
	// The shared informers lend themselves to this term: the handlers its
	// controllers add are removed when it ends, so that a replica that
	// loses and regains leadership does not run two sets.
	caInformer, signerInformer := borrowCAs(deps.CAs), borrowSigners(deps.Signers)
	defer caInformer.inf.end()
	defer signerInformer.inf.end()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute)
	// Each request controller watches only the requests it acts on (field
	// selectors): the approver the pending requests of the signers that
	// approve without a person, the signer the approved ones without a
	// certificate. A request issued in the write that approved it never
	// enters the signer's cache, a Manual signer's request never the
	// approver's, and no controller keeps the finished ones.
	approvedFactory := csrFactory(client, certv1alpha1.StateApproved)
	clk := deps.Clock

	// Rotations and refusals show as events on the objects in the host
	// cluster, so that requesters learn early; without one they are
	// dropped.
	var events record.EventRecorder = discardEvents{}
	if deps.Kube != nil {
		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: deps.Kube.CoreV1().Events("")})
		defer broadcaster.Shutdown()
		events = broadcaster.NewRecorder(clientsetscheme.Scheme, corev1.EventSource{Component: "rekey-apiserver"})
	}
	// Each request's decisions (Approved, Denied, Failed, Issued) as
	// events there, from a watch of every request trimmed to its
	// conditions; without a host cluster nothing would record them, and
	// nothing watches.
	factories := []informers.SharedInformerFactory{factory, approvedFactory}
	if deps.Kube != nil {
		requestEvents := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute, informers.WithTransform(csrevents.Trim))
		if err := (csrevents.Handler{Events: events}).Register(requestEvents.Certificates().V1alpha1().CertificateSigningRequests().Informer()); err != nil {
			return fmt.Errorf("watching requests for their events: %w", err)
		}
		factories = append(factories, requestEvents)
	}

	auth := deps.Authority
	// A rotation's new key signs once every TrustConsumer naming its CA
	// holds it and rekey's own publishers wrote it.
	trust := certificateauthority.Trust{Consumers: factory.Rotation().V1alpha1().TrustConsumers(), Published: deps.Published}
	caController := certificateauthority.NewController(client, caInformer, trust, auth, events, clk)
	signerController := signer.NewController(client, approvedFactory.Certificates().V1alpha1().CertificateSigningRequests(), signerInformer, caInformer, auth, clk)
	approverController := approver.NewController(client, signerInformer, deps.Authorizer, deps.Cluster, events, clk, TrimForCache)
	// The leader prunes the issuance records of expired certificates.
	cleanerController := cleaner.NewController(client, auth.Records, clk, opts.CleanerInterval)

	var publisherController *publisher.Controller
	var hostCSRController *hostcsr.Controller
	var podCertController *podcert.Controller
	var kubeFactory kubeinformers.SharedInformerFactory
	if deps.Kube != nil {
		kubeFactory = kubeinformers.NewSharedInformerFactory(deps.Kube, 10*time.Minute)
		publisherController = publisher.New(publisher.Deps{
			Kube:       deps.PublisherKube,
			CAs:        caInformer,
			Signers:    signerInformer,
			Namespaces: kubeFactory.Core().V1().Namespaces(),
			// Uninstalling rekey deletes this APIService; the garbage
			// collector then removes every bundle rekey published.
			APIServices:     deps.PublisherAPIServices,
			OwnerAPIService: PublishedOwnerAPIService,
			Published:       publisherReporter(deps.Published),
			CRLs:            deps.CRLs,
		})
		// The host cluster's own CSRs of the signer names whose Signer
		// serves them (spec.hostCluster.certificateSigningRequests).
		hostCSRController = hostcsr.NewController(hostcsr.Deps{
			Kube: deps.Kube, CSRs: kubeFactory.Certificates().V1().CertificateSigningRequests(), Signers: signerInformer, CAs: caInformer,
			Authorizer: deps.Authorizer, Cluster: deps.Cluster, Signing: auth.Signing, Events: events, Clock: clk,
		})
		// The host cluster's PodCertificateRequests of the signer names
		// whose Signer serves them (spec.hostCluster.podCertificateRequests).
		podCertController = podcert.New(deps.Kube, signerInformer, auth.Signing, clk, TrimForCache)
	}

	// Revocations: the Revoked condition on their requests, deleted after
	// their certificate expires or with the CA key a rotation destroys.
	var revocations certinformers.RevocationInformer
	if deps.Revocations != nil {
		borrowed := borrowRevocations(deps.Revocations)
		defer borrowed.inf.end()
		revocations = borrowed
	} else {
		revocations = factory.Certificates().V1alpha1().Revocations()
	}
	records, _ := auth.Records.(revocation.Records) // nil: no look at the records
	revocationController := revocation.NewController(client, revocations, records, clk)
	caController.Revocations = revocation.Pruner{Client: client}

	credential.RegisterMetrics()
	credentialController := credential.NewController(client, deps.Kube, factory.Rotation().V1alpha1().RotatingCredentials(), caInformer, signerInformer, clk)

	for _, f := range factories {
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
		defer kubeFactory.Shutdown()
		run(func() { publisherController.Run(ctx, 2) })
		run(func() { hostCSRController.Run(ctx, 2) })
		run(func() { podCertController.Run(ctx, opts.SignerWorkers) })
	}
	run(func() { caController.Run(ctx, 2) })
	run(func() { signerController.Run(ctx, opts.SignerWorkers) })
	run(func() { approverController.Run(ctx, opts.SignerWorkers) })
	run(func() { cleanerController.Run(ctx) })
	run(func() { revocationController.Run(ctx, 2) })
	run(func() { credentialController.Run(ctx, 16) })
	logger.Info("Controllers started", "signerWorkers", opts.SignerWorkers)
	<-ctx.Done()
	wg.Wait()
	logger.Info("Controllers stopped")
	return nil
}

// PublisherName is the name the publisher reports under (trustpublish).
const PublisherName = "rekey-publisher (ConfigMaps, ClusterTrustBundles)"

// publisherReporter registers this term's publisher with the tracker
// (replacing the last term's), nil without a tracker.
func publisherReporter(t *trustpublish.Tracker) *trustpublish.Reporter {
	if t == nil {
		return nil
	}
	return t.Register(PublisherName, publisher.Concerns)
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

// builtInsAttempts and builtInsBackoff bound ensureBuiltIns' retries:
// about 16 s, longer than an etcd leader election and its 7 s request
// timeout.
var (
	builtInsAttempts = 8
	builtInsBackoff  = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Cap: 5 * time.Second, Steps: builtInsAttempts}
)

// ensureBuiltIns is EnsureBuiltIns retrying what a passing fault fails: a
// 5xx, a timeout or a 429 from rekey's own API while, say, etcd elects a
// leader. Ending the term on it would leave this replica unready until it
// next leads, which may be never; while it retries, readiness says why.
// Anything else (a refused connection, a rejected object) ends the term at
// once, so that another replica may lead.
func (m *Manager) ensureBuiltIns(ctx context.Context, client clientset.Interface, hostCluster, insecureTest bool) error {
	backoff := builtInsBackoff
	for attempt := 1; ; attempt++ {
		err := EnsureBuiltIns(ctx, client, hostCluster, insecureTest)
		if err == nil || !transient(err) || attempt >= builtInsAttempts || ctx.Err() != nil {
			return err
		}
		m.report(fmt.Errorf("creating the built-in signers (attempt %d, retrying): %w", attempt, err))
		klog.FromContext(ctx).Info("Creating the built-in signers failed; retrying", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-m.deps.Clock.After(backoff.Step()):
		}
	}
}

// transient says whether err is an API server's answer that the same
// request may not get again shortly.
func transient(err error) bool {
	return apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) || apierrors.IsUnexpectedServerError(err)
}

// discardEvents is the event recorder without a host cluster: rekey's own
// objects have no Event API to record on.
type discardEvents struct{}

func (discardEvents) Event(runtime.Object, string, string, string)          {}
func (discardEvents) Eventf(runtime.Object, string, string, string, ...any) {}
func (discardEvents) AnnotatedEventf(runtime.Object, map[string]string, string, string, string, ...any) {
}
