package authority

import (
	"context"

	"k8s.io/utils/clock"

	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/signing/cabinding"
)

// Service is the one answer, per server, to "which key signs for this CA,
// and where is what it signed recorded". The server builds it once and
// hands it to everything that signs or reads CA keys: the issuer in the
// request path, the controllers on the leader and the serving-certificate
// manager. So there is one cache of bound keys and one recorder, and a CA
// whose key the CA controller forgets (after a rotation) is forgotten by
// every consumer at once.
type Service struct {
	// Stores resolves a CA's keyStore spec to the store holding its keys.
	Stores *KeyStores
	// Bindings say which key and certificate a CA signs with.
	Bindings cabinding.Store
	// Authorities is the cache of bound keys, read through the server's
	// one CertificateAuthority informer.
	Authorities *Authorities
	// Records is where every issuance is recorded before its certificate
	// is published.
	Records Records
	// Signing signs under a Signer's policy with Authorities and records
	// with Records.
	Signing *Signing
}

// Config is what a Service is built from.
type Config struct {
	Stores   *KeyStores
	Bindings cabinding.Store
	// CAs reads CertificateAuthorities: the lister of the server's one
	// informer on them.
	CAs     rotationlisters.CertificateAuthorityLister
	Records Records
	Clock   clock.PassiveClock
}

// Records is what the server records of each issuance, per CA
// (issuance.Recorder): written before a certificate is published, read by
// a rotation to count who has not renewed, pruned once expired.
type Records interface {
	Recorder
	// Scan reads every record of a CA, a page at a time.
	Scan(ctx context.Context, caName string, fn func(issuance.Record) error) error
	// Revision changes whenever a record of the CA is written.
	Revision(ctx context.Context, caName string) (int64, error)
	// Prune deletes the records of a CA ("" is every CA) that drop selects.
	Prune(ctx context.Context, caName string, drop func(issuance.Record) bool) (int, error)
}

var _ Records = &issuance.Recorder{}

// NewService builds the service; it starts nothing (the recorder and the
// informer behind CAs are started by whoever made them).
//
// When the records are an issuance.Recorder and the bindings are in etcd
// (cabinding.EtcdStore), every record is written on the condition that its
// CA key is still live in etcd (bound, and for an Etcd key stored): a
// replica whose view of a CA is stale cannot publish a certificate of a key
// a completed rotation destroyed.
func NewService(cfg Config) *Service {
	if rec, ok := cfg.Records.(interface{ SetKeyGuard(issuance.KeyGuard) }); ok {
		if bindings, ok := cfg.Bindings.(bindingGuard); ok {
			var keys storedKeyGuard
			if cfg.Stores != nil {
				keys, _ = cfg.Stores.Etcd.(storedKeyGuard)
			}
			rec.SetKeyGuard(newKeyGuard(bindings, keys, cfg.CAs))
		}
	}
	authorities := NewAuthorities(cfg.CAs, cfg.Stores, cfg.Bindings)
	return &Service{
		Stores:      cfg.Stores,
		Bindings:    cfg.Bindings,
		Authorities: authorities,
		Records:     cfg.Records,
		Signing:     &Signing{Authorities: authorities, Recorder: cfg.Records, Clock: cfg.Clock},
	}
}
