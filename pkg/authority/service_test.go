package authority

import (
	"context"
	"testing"

	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/signing/cabinding"
)

type records struct{ Records }

func (records) Record(context.Context, issuance.Record) error { return nil }

// TestServiceSignsThroughItsOneCache: the Signing a Service hands out
// reads keys from the Service's own Authorities and records in its
// Records, so that every consumer shares one cache and one recorder.
func TestServiceSignsThroughItsOneCache(t *testing.T) {
	lister := rotationlisters.NewCertificateAuthorityLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	rec := records{}
	s := NewService(Config{Stores: &KeyStores{}, Bindings: cabinding.NewMemoryStore(), CAs: lister, Records: rec, Clock: clock.RealClock{}})
	if s.Signing.Authorities != s.Authorities {
		t.Error("Signing reads keys from a cache of its own")
	}
	if s.Signing.Recorder != Recorder(rec) || s.Records != Records(rec) {
		t.Error("Signing records somewhere else than the service's recorder")
	}
	if s.Authorities.Lister != lister || s.Authorities.Stores != s.Stores || s.Authorities.Bindings != s.Bindings {
		t.Error("the cache reads CAs, stores or bindings other than the service's")
	}
}
