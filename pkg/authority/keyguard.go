package authority

import (
	"context"
	"fmt"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
)

// bindingGuard is the binding store's half of the key guard
// (cabinding.EtcdStore).
type bindingGuard interface {
	KeyGuard(ctx context.Context, caName, keyID string) (clientv3.Cmp, bool, error)
}

// storedKeyGuard is the Etcd key store's half (signing.EtcdKeyStore).
type storedKeyGuard interface {
	KeyGuard(ctx context.Context, keyID string) (clientv3.Cmp, bool, error)
}

// keyGuard is the issuance.KeyGuard of a server: a record's key is live
// while its CA's binding lists it and, for a CA whose keys are in the Etcd
// key store, while the key's entry exists. Completing a rotation destroys
// the previous key (an Etcd key's entry is deleted; a PKCS#11 key leaves
// nothing in etcd) and then drops it from the binding, so a record of it
// fails from the destroy on (Etcd) or from the binding's change on (every
// key store).
//
// The comparisons are cached per CA key: etcd checks them in the record's
// own transaction, so a cached one can only fail a write (the recorder
// then asks again, fresh), never let one through.
type keyGuard struct {
	bindings bindingGuard
	keys     storedKeyGuard // nil: no Etcd key store
	cas      rotationlisters.CertificateAuthorityLister

	mu    sync.Mutex
	cache map[guardKey][]clientv3.Cmp
}

type guardKey struct{ ca, key string }

func newKeyGuard(bindings bindingGuard, keys storedKeyGuard, cas rotationlisters.CertificateAuthorityLister) *keyGuard {
	return &keyGuard{bindings: bindings, keys: keys, cas: cas, cache: map[guardKey][]clientv3.Cmp{}}
}

// Guard implements issuance.KeyGuard.
func (g *keyGuard) Guard(ctx context.Context, caName, keyID string, fresh bool) ([]clientv3.Cmp, error) {
	if strings.HasPrefix(keyID, fileKeyIDPrefix) {
		// A File CA's key is the operator's files: no rotation of rekey's
		// destroys it, and there is no binding.
		return nil, nil
	}
	k := guardKey{caName, keyID}
	if !fresh {
		g.mu.Lock()
		cmps, ok := g.cache[k]
		g.mu.Unlock()
		if ok {
			return cmps, nil
		}
	}
	cmps, err := g.read(ctx, caName, keyID)
	g.mu.Lock()
	if err == nil {
		g.cache[k] = cmps
	} else {
		delete(g.cache, k)
	}
	g.mu.Unlock()
	return cmps, err
}

func (g *keyGuard) read(ctx context.Context, caName, keyID string) ([]clientv3.Cmp, error) {
	bindingCmp, bound, err := g.bindings.KeyGuard(ctx, caName, keyID)
	if err != nil {
		return nil, err
	}
	if !bound {
		return nil, fmt.Errorf("CertificateAuthority %s no longer binds key %s: %w", caName, keyID, issuance.ErrKeyRetired)
	}
	cmps := []clientv3.Cmp{bindingCmp}
	// The key store is part of the CA's spec, which does not change; a CA
	// the informer no longer holds is checked by its binding alone.
	ca, err := g.cas.Get(caName)
	if err != nil || !inEtcdKeyStore(ca) {
		return cmps, nil
	}
	if g.keys == nil {
		return nil, fmt.Errorf("CertificateAuthority %s keeps its keys in the Etcd key store, which is not configured", caName)
	}
	keyCmp, exists, err := g.keys.KeyGuard(ctx, keyID)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("key %s of CertificateAuthority %s is destroyed: %w", keyID, caName, issuance.ErrKeyRetired)
	}
	return append(cmps, keyCmp), nil
}

func inEtcdKeyStore(ca *rotationv1alpha1.CertificateAuthority) bool {
	t := ca.Spec.KeyStore.Type
	return t == rotationv1alpha1.KeyStoreEtcd || t == ""
}
