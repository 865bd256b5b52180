// Package manager starts rekey's controllers on the elected leader: it
// creates the built-in CAs and signers, then runs the CA, signer, approver
// and cleaner controllers until leadership is lost.
package manager

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	clientv3 "go.etcd.io/etcd/client/v3"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/controller/approver"
	"rekey.io/rekey/pkg/controller/certificateauthority"
	"rekey.io/rekey/pkg/controller/cleaner"
	"rekey.io/rekey/pkg/controller/csrutil"
	"rekey.io/rekey/pkg/controller/signer"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/leaderelection"
	"rekey.io/rekey/pkg/policy"
	"rekey.io/rekey/pkg/signing/cabinding"
)

// Config is what the controllers need.
type Config struct {
	// RESTConfig reaches rekey's own API (the loopback client).
	RESTConfig *rest.Config
	// Authorizer answers the approver's SubjectAccessReviews.
	Authorizer authorizer.Authorizer
	KeyStores  *certificateauthority.KeyStores
	Etcd       *clientv3.Client
	// PrivatePrefix is the etcd prefix for keys, issuance records and the
	// leader election.
	PrivatePrefix string

	LeaderElect   bool
	LeaseDuration time.Duration
	Identity      string

	SignerWorkers   int
	CleanerInterval time.Duration
}

// Run runs the controllers (on the leader only, when LeaderElect) until ctx
// is done.
func Run(ctx context.Context, cfg Config) {
	if !cfg.LeaderElect {
		runControllers(ctx, cfg)
		return
	}
	leaderelection.Run(ctx, leaderelection.Config{
		Client:        cfg.Etcd,
		Key:           cfg.PrivatePrefix + "/leader",
		Identity:      cfg.Identity,
		LeaseDuration: cfg.LeaseDuration,
		Run:           func(ctx context.Context) { runControllers(ctx, cfg) },
	})
}

func runControllers(ctx context.Context, cfg Config) {
	logger := klog.FromContext(ctx)
	restConfig := rest.CopyConfig(cfg.RESTConfig)
	// The controllers are the server's own clients: do not throttle them,
	// and do not compress what never leaves the process (as kube-apiserver
	// does for its loopback client). The generated clients speak protobuf.
	restConfig.QPS, restConfig.Burst = 5000, 10000
	restConfig.DisableCompression = true
	client, err := clientset.NewForConfig(restConfig)
	if err != nil {
		logger.Error(err, "Creating the controllers' client")
		return
	}
	if err := EnsureBuiltIns(ctx, client); err != nil {
		logger.Error(err, "Creating the built-in signers")
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute, informers.WithTransform(TrimForCache))
	clk := clock.RealClock{}
	caInformer := factory.Rotation().V1alpha1().CertificateAuthorities()
	csrInformer := factory.Certificates().V1alpha1().CertificateSigningRequests()
	signerInformer := factory.Certificates().V1alpha1().Signers()

	if cfg.Etcd == nil {
		logger.Error(nil, "The controllers need etcd for CA key bindings and issuance records")
		return
	}
	authorities := certificateauthority.NewAuthorities(caInformer.Lister(), cfg.KeyStores, cabinding.NewEtcdStore(cfg.Etcd, cfg.PrivatePrefix))
	caController := certificateauthority.NewController(client, caInformer, authorities, clk)
	recorder := issuance.NewRecorder(ctx, cfg.Etcd, cfg.PrivatePrefix)
	signerController := signer.NewController(client, csrInformer, signerInformer, authorities, recorder, clk)
	caController.OnChange = signerController.CAChanged
	approverController := approver.NewController(client, csrInformer, signerInformer, cfg.Authorizer, clk)
	cleanerController := cleaner.NewController(client, csrInformer.Lister(), clk, cfg.CleanerInterval)

	factory.Start(ctx.Done())
	done := make(chan struct{}, 4)
	run := func(f func()) {
		go func() { f(); done <- struct{}{} }()
	}
	run(func() { caController.Run(ctx, 2) })
	run(func() { signerController.Run(ctx, cfg.SignerWorkers) })
	run(func() { approverController.Run(ctx, cfg.SignerWorkers) })
	run(func() {
		if factory.WaitForCacheSync(ctx.Done()); ctx.Err() == nil {
			cleanerController.Run(ctx)
		}
	})
	logger.Info("Controllers started", "signerWorkers", cfg.SignerWorkers)
	<-ctx.Done()
	for i := 0; i < 4; i++ {
		<-done
	}
	factory.Shutdown()
	logger.Info("Controllers stopped")
}

// TrimForCache drops from the controllers' cache what no controller reads,
// so that the process holding the API server's watch cache does not hold a
// second full copy of every request: managed fields always, and the
// request itself once the request is finished (issued, denied or failed).
// The objects are only read from the cache; writes start from them but the
// API keeps the stored spec on every subresource update.
func TrimForCache(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	if csr, ok := obj.(*certv1alpha1.CertificateSigningRequest); ok {
		if len(csr.Status.Certificate) > 0 || csrutil.IsDenied(csr) || csrutil.IsFailed(csr) {
			csr.Spec.Request = nil
		}
	}
	return obj, nil
}

// EnsureBuiltIns creates the built-in CAs and signers that do not exist
// yet. Existing ones are left as they are: an operator may have tuned them.
func EnsureBuiltIns(ctx context.Context, client clientset.Interface) error {
	for _, b := range policy.BuiltIns() {
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
