// Package trustpublish tells the CertificateAuthority controller which
// trust bundles rekey's own publishers have written everywhere they write
// them: the publisher (ConfigMaps and ClusterTrustBundles) and the serving
// certificate manager (its APIServices' caBundle). A rotation's next CA
// signs only once every publisher that concerns the CA holds a bundle with
// it (issue: trust before use); rekey sees those writes itself, so they
// need no report from a consumer.
//
// The record is in memory: after a restart, or on a new leader, each
// publisher syncs every CA and reports again before the wait can end, which
// errs on the safe side.
package trustpublish

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"sync"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
)

// Tracker holds each publisher's last report per CA.
type Tracker struct {
	mu      sync.Mutex
	sources map[string]*Reporter
	// onChange is called, outside the lock, with the name of a CA whose
	// report changed.
	onChange func(caName string)
}

// New returns a Tracker without publishers.
func New() *Tracker {
	return &Tracker{sources: map[string]*Reporter{}}
}

// Reporter is one publisher's handle.
type Reporter struct {
	t        *Tracker
	name     string
	concerns func(*rotationv1alpha1.CertificateAuthority) bool
	// state is per CA: the digest of the bundle written everywhere, or
	// the error that stopped it.
	state map[string]report
}

type report struct {
	digest string
	err    string
}

// Register adds (or replaces: a new leadership term's publisher starts
// afresh) the publisher called name; concerns says which CAs it publishes,
// so that a CA it does not publish never waits for it.
func (t *Tracker) Register(name string, concerns func(*rotationv1alpha1.CertificateAuthority) bool) *Reporter {
	r := &Reporter{t: t, name: name, concerns: concerns, state: map[string]report{}}
	t.mu.Lock()
	t.sources[name] = r
	t.mu.Unlock()
	return r
}

// OnChange sets the function told about a CA whose report changed.
func (t *Tracker) OnChange(fn func(caName string)) {
	t.mu.Lock()
	t.onChange = fn
	t.mu.Unlock()
}

// Published records that bundle is now written everywhere r writes the
// CA's bundle.
func (r *Reporter) Published(caName, bundle string) {
	r.set(caName, report{digest: Digest(bundle)})
}

// Failed records that r could not write the CA's bundle everywhere.
func (r *Reporter) Failed(caName string, err error) {
	r.set(caName, report{err: err.Error()})
}

// Forget drops what r reported for a deleted CA.
func (r *Reporter) Forget(caName string) {
	r.t.mu.Lock()
	delete(r.state, caName)
	r.t.mu.Unlock()
}

func (r *Reporter) set(caName string, rep report) {
	r.t.mu.Lock()
	changed := r.state[caName] != rep
	r.state[caName] = rep
	fn := r.t.onChange
	r.t.mu.Unlock()
	if changed && fn != nil {
		fn(caName)
	}
}

// Lagging names, sorted, the publishers that concern ca and have not
// reported its status.trustBundle written everywhere, each with why.
func (t *Tracker) Lagging(ca *rotationv1alpha1.CertificateAuthority) []string {
	want := Digest(ca.Status.TrustBundle)
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for name, r := range t.sources {
		if !r.concerns(ca) {
			continue
		}
		rep, ok := r.state[ca.Name]
		switch {
		case !ok:
			out = append(out, name+": not written yet")
		case rep.err != "":
			out = append(out, name+": "+rep.err)
		case rep.digest != want:
			out = append(out, name+": writing the new bundle")
		}
	}
	sort.Strings(out)
	return out
}

// Digest names a bundle's content.
func Digest(bundle string) string {
	sum := sha256.Sum256([]byte(bundle))
	return hex.EncodeToString(sum[:])
}
