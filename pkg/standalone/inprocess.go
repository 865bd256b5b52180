package standalone

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdkubernetes "go.etcd.io/etcd/client/v3/kubernetes"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	cacherstorage "k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/etcd3"
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	"k8s.io/client-go/tools/cache"
)

// compactionInterval is how often the API storage compacts the embedded
// etcd's history, as kube-apiserver's default --etcd-compaction-interval.
const compactionInterval = 5 * time.Minute

// InProcess reaches the embedded etcd by direct calls instead of gRPC over
// its socket: the same requests, without encoding them, framing them over
// HTTP/2 and decoding them again on both sides. In the issuance benchmark
// that transport was about 8% of the standalone server's CPU.
type InProcess struct {
	client    *clientv3.Client
	kube      *etcdkubernetes.Client
	compactor interface {
		etcd3.Compactor
		Stop()
	}
	closeOnce sync.Once
}

// InProcess returns the embedded etcd's in-process client. The socket
// stays open for etcdctl and the tests.
func (e *Etcd) InProcess() *InProcess {
	e.inProcessOnce.Do(func() {
		client := v3client.New(e.server.Server)
		kube := &etcdkubernetes.Client{Client: client}
		kube.Kubernetes = kube
		// The API storage's requests are timed like those of a client
		// over the network (metric etcd_request_duration_seconds).
		kube.KV = etcd3.NewETCDLatencyTracker(kube.KV)
		e.inProcess = &InProcess{client: client, kube: kube, compactor: etcd3.StartCompactorPerEndpoint(client, compactionInterval)}
		// Whether etcd answers progress requests is asked of each
		// endpoint, and this client has none: without the answer, the
		// watch cache of a resource nobody writes never catches up with
		// etcd's revision, and a consistent read of it times out.
		etcdfeature.DefaultFeatureSupportChecker.CheckClient(client.Ctx(), inProcessEndpoint{client}, storage.RequestWatchProgress)
	})
	return e.inProcess
}

// inProcessEndpoint presents the in-process client to the feature
// checker as one endpoint; Status ignores the endpoint name and asks the
// embedded server.
type inProcessEndpoint struct{ client *clientv3.Client }

func (e inProcessEndpoint) Endpoints() []string { return []string{"in-process"} }

func (e inProcessEndpoint) Status(ctx context.Context, endpoint string) (*clientv3.StatusResponse, error) {
	return e.client.Status(ctx, endpoint)
}

// Client is the in-process client for rekey's private data.
func (p *InProcess) Client() *clientv3.Client { return p.client }

// Close stops the compactor and the client; the server closes after it.
func (p *InProcess) Close() {
	p.closeOnce.Do(func() {
		p.compactor.Stop()
		_ = p.client.Close()
	})
}

// RESTOptionsGetter returns the options of inner with storage on the
// in-process client: each resource's store is made as the generic etcd
// storage makes it (codec, prefix, transformer, lease manager), and with
// watchCache under the same watch cache.
func (p *InProcess) RESTOptionsGetter(inner generic.RESTOptionsGetter, watchCache bool) generic.RESTOptionsGetter {
	return &inProcessOptions{inner: inner, storage: p, watchCache: watchCache}
}

type inProcessOptions struct {
	inner      generic.RESTOptionsGetter
	storage    *InProcess
	watchCache bool
}

func (o *inProcessOptions) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := o.inner.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	opts.Decorator = o.decorator
	return opts, nil
}

// decorator is genericregistry.StorageWithCacher (or
// generic.UndecoratedStorage without the watch cache) over rawStorage.
func (o *inProcessOptions) decorator(c *storagebackend.ConfigForResource, resourcePrefix string, keyFunc func(obj runtime.Object) (string, error),
	newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, triggers storage.IndexerFuncs, indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
	raw, destroy, err := o.rawStorage(c, newFunc, newListFunc, resourcePrefix)
	if err != nil || !o.watchCache {
		return raw, destroy, err
	}
	cacher, err := cacherstorage.NewCacherFromConfig(cacherstorage.Config{
		Storage:             raw,
		Versioner:           storage.APIObjectVersioner{},
		GroupResource:       c.GroupResource,
		EventsHistoryWindow: c.EventsHistoryWindow,
		ResourcePrefix:      resourcePrefix,
		KeyFunc:             keyFunc,
		NewFunc:             newFunc,
		NewListFunc:         newListFunc,
		GetAttrsFunc:        getAttrs,
		IndexerFuncs:        triggers,
		Indexers:            indexers,
		Codec:               c.Codec,
	})
	if err != nil {
		destroy()
		return nil, func() {}, err
	}
	delegator := cacherstorage.NewCacheDelegator(cacher, raw)
	var once sync.Once
	return delegator, func() {
		once.Do(func() {
			delegator.Stop()
			cacher.Stop()
			destroy()
		})
	}, nil
}

// rawStorage is the etcd3 store of one resource, as the generic factory
// makes it, on the shared in-process client.
func (o *inProcessOptions) rawStorage(c *storagebackend.ConfigForResource, newFunc, newListFunc func() runtime.Object, resourcePrefix string) (storage.Interface, factory.DestroyFunc, error) {
	transformer := c.Transformer
	if transformer == nil {
		transformer = identity.NewEncryptCheckTransformer()
	}
	versioner := storage.APIObjectVersioner{}
	store, err := etcd3.New(o.storage.kube, o.storage.compactor, c.Codec, newFunc, newListFunc, c.Prefix, resourcePrefix, c.GroupResource,
		transformer, c.LeaseManagerConfig, etcd3.NewDefaultDecoder(c.Codec, versioner), versioner)
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	return store, func() { once.Do(store.Close) }, nil
}
