package servingcert

import (
	"context"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/authority"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/signing/cabinding"
)

// LegacyManager builds a Manager's dependencies itself, for the server
// until it hands them to New.
//
// Deprecated: use New with the server's shared CA informer and CA-key
// cache.
type LegacyManager struct {
	cfg      Config
	replica  string
	stores   *authority.KeyStores
	bindings cabinding.Store
	records  *issuance.Recorder
	kube     dynamic.Interface
}

// NewManager returns a manager that builds its own CA informer and CA-key
// cache; kube is nil without a host cluster.
//
// Deprecated: use New.
func NewManager(cfg Config, replica string, stores *authority.KeyStores, bindings cabinding.Store, records *issuance.Recorder, kube dynamic.Interface) *LegacyManager {
	return &LegacyManager{cfg: cfg, replica: replica, stores: stores, bindings: bindings, records: records, kube: kube}
}

// Run builds the dependencies with a client for restConfig and runs the
// manager until ctx is done.
func (l *LegacyManager) Run(ctx context.Context, restConfig *rest.Config) {
	client, err := clientset.NewForConfig(rest.AddUserAgent(rest.CopyConfig(restConfig), UserAgent))
	if err != nil {
		klog.FromContext(ctx).Error(err, "Creating the serving CA client")
		return
	}
	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	cas := factory.Rotation().V1alpha1().CertificateAuthorities()
	m := New(l.cfg, Deps{
		Replica:     l.replica,
		Authorities: authority.NewAuthorities(cas.Lister(), l.stores, l.bindings),
		Records:     l.records,
		CAs:         cas,
		Client:      client,
		APIServices: l.kube,
		Clock:       clock.RealClock{},
	})
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	m.Run(ctx)
}
