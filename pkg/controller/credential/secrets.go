package credential

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// secretWatches watches the Secrets rekey labelled, one informer per
// namespace that holds RotatingCredentials (rekey may read Secrets only
// where an operator bound it, never cluster-wide), so that a Secret
// deleted or edited by hand is noticed as soon as kube-apiserver sends the
// event, not at the next resync. The label only selects what to watch:
// whether a Secret is rekey's is decided by CreatedByRekey. The cache
// keeps no Secret data.
type secretWatches struct {
	kube kubernetes.Interface
	// owners maps a Secret to the keys of the RotatingCredentials that name
	// it.
	owners  func(namespace, secret string) []string
	enqueue func(key string)

	mu     sync.Mutex
	byNS   map[string]context.CancelFunc
	synced map[string]cache.InformerSynced
}

func newSecretWatches(kube kubernetes.Interface, owners func(string, string) []string, enqueue func(string)) *secretWatches {
	return &secretWatches{kube: kube, owners: owners, enqueue: enqueue, byNS: map[string]context.CancelFunc{}, synced: map[string]cache.InformerSynced{}}
}

// ensure starts the watch of namespace ns unless it runs; it stops with
// ctx or with stop.
func (w *secretWatches) ensure(ctx context.Context, ns string) {
	if w == nil || w.kube == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.byNS[ns]; ok {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	w.byNS[ns] = cancel
	selector := labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy}).String()
	informer := coreinformers.NewFilteredSecretInformer(w.kube, ns, 0, cache.Indexers{}, func(o *metav1.ListOptions) { o.LabelSelector = selector })
	// Only the names and annotations are needed to find the owner: no
	// credential stays in rekey's memory.
	// (A new object: the one decoded may be shared.)
	_ = informer.SetTransform(func(obj any) (any, error) {
		if s, ok := obj.(*corev1.Secret); ok {
			kept := &corev1.Secret{TypeMeta: s.TypeMeta, ObjectMeta: *s.ObjectMeta.DeepCopy(), Type: s.Type}
			kept.ManagedFields = nil
			return kept, nil
		}
		return obj, nil
	})
	handle := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if s, ok := obj.(*corev1.Secret); ok {
			for _, key := range w.owners(s.Namespace, s.Name) {
				w.enqueue(key)
			}
		}
	}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
		DeleteFunc: handle,
	})
	w.synced[ns] = informer.HasSynced
	klog.FromContext(ctx).V(2).Info("Watching rekey's Secrets", "namespace", ns)
	go informer.RunWithContext(ctx)
}

// stop ends the watch of namespace ns (its last RotatingCredential went).
func (w *secretWatches) stop(ns string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if cancel, ok := w.byNS[ns]; ok {
		cancel()
		delete(w.byNS, ns)
		delete(w.synced, ns)
	}
}

// hasSynced says whether the watch of ns listed once (tests).
func (w *secretWatches) hasSynced(ns string) bool {
	w.mu.Lock()
	synced := w.synced[ns]
	w.mu.Unlock()
	return synced != nil && synced()
}
