package history

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/signing"
)

// t0 is the tests' clock origin.
var t0 = time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)

// testCA is a CA key and its self-signed certificate.
type testCA struct {
	name  string
	keyID string // the key-store ID records name
	key   *ecdsa.PrivateKey
	cert  *x509.Certificate
}

func newCA(t testing.TB, name, keyID string, notBefore time.Time) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + "-" + keyID},
		NotBefore: notBefore, NotAfter: notBefore.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	if len(cert.SubjectKeyId) == 0 {
		t.Fatal("CA certificate has no SubjectKeyId")
	}
	return &testCA{name: name, keyID: keyID, key: key, cert: cert}
}

// leafKey is shared by every test leaf: the checker never looks at it.
var leafKey, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)

// issued is one test leaf certificate.
type issued struct {
	pem  []byte
	cert *x509.Certificate
	ca   *testCA
}

// sign issues a leaf as rekey does at signedAt: NotBefore = signedAt -
// signing.Backdate, clamped to the CA's NotBefore.
func (ca *testCA) sign(t testing.TB, serial int64, signedAt time.Time) issued {
	t.Helper()
	nb := signedAt.Add(-signing.Backdate)
	if nb.Before(ca.cert.NotBefore) {
		nb = ca.cert.NotBefore
	}
	return ca.signNB(t, serial, nb)
}

func (ca *testCA) signNB(t testing.TB, serial int64, notBefore time.Time) issued {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: notBefore, NotAfter: notBefore.Add(2 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &leafKey.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	// The chain follows the leaf, as in status.certificate.
	p = append(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})...)
	return issued{pem: p, cert: cert, ca: ca}
}

// record is the issuance record rekey writes for c.
func (c issued) record(csrName, uid string) issuance.Record {
	return issuance.Record{
		Serial: c.cert.SerialNumber.Text(16), CSRName: csrName, CSRUID: uid, SignerName: "example.com/fault",
		CAName: c.ca.name, CAKeyID: c.ca.keyID, NotBefore: c.cert.NotBefore, NotAfter: c.cert.NotAfter,
		SHA256: issuance.SHA256(c.cert),
	}
}

// builder makes a history with a clock that moves one second per op.
type builder struct {
	ops []Op
	now time.Time
}

func (b *builder) op(kind Kind, replica int, object, uid string, outcome Outcome, mod func(*Op)) *Op {
	b.now = b.now.Add(time.Second)
	op := Op{ID: len(b.ops) + 1, Kind: kind, Replica: replica, Object: object, UID: uid,
		Start: b.now, End: b.now.Add(100 * time.Millisecond), Outcome: outcome}
	if mod != nil {
		mod(&op)
	}
	b.ops = append(b.ops, op)
	return &b.ops[len(b.ops)-1]
}

func obs(name, rv, phase string, at time.Time, current, next, previous *testCA, completed time.Time) CAObservation {
	o := CAObservation{Time: at, Name: name, ResourceVersion: rv, Phase: phase, LastCompletionTime: completed}
	if current != nil {
		o.Current, o.CurrentKeyID = current.cert, current.keyID
	}
	if next != nil {
		o.Next, o.NextKeyID = next.cert, next.keyID
	}
	if previous != nil {
		o.Previous, o.PreviousKeyID = previous.cert, previous.keyID
	}
	return o
}

// world is a clean run: two request lifetimes approved and signed (one by
// the key a rotation retires, before it completed), one denied, one whose
// create's outcome was unknown and that was found and approved, one NodeClient
// create, a rotation start to complete, and one unpublished signature (of
// an approval whose outcome was unknown). The record history is complete:
// it holds the records Complete pruned.
type world struct {
	ops   []Op
	cas   []CAObservation
	final Final

	k0, k1               *testCA
	completedAt          time.Time
	certA, certB, certC  issued         // requests a, b, n (NodeClient)
	certD, unpublished   issued         // request d (found after an unknown create); a lost signature of b
	idx                  map[string]int // op index by label
	finalIdx             map[string]int // final CSR index by name
	recIdx               map[string]int // record index by label
	everIdx              map[string]int // RecordsEverWritten index by label
	obsCompleted, obsEnd int            // indexes in cas
}

func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{idx: map[string]int{}, finalIdx: map[string]int{}, recIdx: map[string]int{}}
	w.k0 = newCA(t, "fault", "gen-0", t0.Add(-time.Hour))
	w.k1 = newCA(t, "fault", "gen-1", t0.Add(-time.Minute))
	b := &builder{now: t0}
	label := func(l string, op *Op) { w.idx[l] = op.ID - 1 }

	// Request a: signed by k0 before the rotation completes.
	w.certA = w.k0.sign(t, 0x1a, t0.Add(2*time.Second))
	label("createA", b.op(KindCreate, 0, "a", "uid-a", OK, func(o *Op) { o.ResourceVersion = "10" }))
	label("getA", b.op(KindGet, 1, "a", "uid-a", OK, func(o *Op) { o.ResourceVersion = "10"; o.AfterWrite = 1 }))
	label("approveA", b.op(KindApprove, 2, "a", "uid-a", OK, func(o *Op) { o.ResourceVersion = "11"; o.Approved = true }))
	label("getA2", b.op(KindGet, 0, "a", "uid-a", OK, func(o *Op) {
		o.ResourceVersion = "12"
		o.Approved = true
		o.Certificate = w.certA.pem
		o.AfterWrite = w.idx["approveA"] + 1
	}))

	// Request d: its create's outcome is unknown, the retry finds it
	// stored (AlreadyExists), a read finds it, the approval is
	// acknowledged.
	label("createD", b.op(KindCreate, 1, "d", "", Unknown, func(o *Op) { o.Err = "context deadline exceeded" }))
	label("createD2", b.op(KindCreate, 2, "d", "", Failed, func(o *Op) { o.Err = "already exists"; o.Reason = "AlreadyExists" }))
	label("findD", b.op(KindGet, 0, "d", "uid-d", OK, func(o *Op) { o.ResourceVersion = "13" }))
	label("approveD", b.op(KindApprove, 1, "d", "uid-d", OK, func(o *Op) { o.ResourceVersion = "14"; o.Approved = true }))
	w.certD = w.k0.sign(t, 0x1d, b.now)

	// Request x: denied.
	label("createX", b.op(KindCreate, 0, "x", "uid-x", OK, func(o *Op) { o.ResourceVersion = "15" }))
	label("denyX", b.op(KindDeny, 2, "x", "uid-x", OK, func(o *Op) { o.ResourceVersion = "16"; o.Denied = true }))
	label("getX", b.op(KindGet, 1, "x", "uid-x", OK, func(o *Op) {
		o.ResourceVersion = "16"
		o.Denied = true
		o.AfterWrite = w.idx["denyX"] + 1
	}))

	// The rotation: start, prepared, complete, completed.
	label("start", b.op(KindRotateStart, 0, "fault", "", OK, nil))
	tPreparing := b.now.Add(200 * time.Millisecond)
	label("complete", b.op(KindRotateComplete, 1, "fault", "", OK, nil))
	w.completedAt = b.now.Add(500 * time.Millisecond).Truncate(time.Second)

	// Request b: signed by k1 after the rotation; the first approval's
	// outcome is unknown: it signed (recorded) and its write was lost;
	// the second signed again and was acknowledged.
	label("createB", b.op(KindCreate, 0, "b", "uid-b", OK, func(o *Op) { o.ResourceVersion = "60" }))
	w.unpublished = w.k1.sign(t, 0x2b, b.now.Add(time.Second))
	label("approveB0", b.op(KindApprove, 1, "b", "uid-b", Unknown, func(o *Op) { o.Err = "context deadline exceeded" }))
	w.certB = w.k1.sign(t, 0x1b, b.now.Add(60*time.Millisecond))
	label("approveB", b.op(KindApprove, 2, "b", "uid-b", OK, func(o *Op) { o.ResourceVersion = "61"; o.Approved = true }))

	// Request n: a NodeClient create, signed at once.
	w.certC = w.k1.sign(t, 0x1c, b.now.Add(time.Second))
	label("nodeN", b.op(KindNodeClient, 1, "n", "uid-n", OK, func(o *Op) {
		o.ResourceVersion = "62"
		o.Approved = true
		o.Certificate = w.certC.pem
	}))
	label("getN", b.op(KindGet, 2, "n", "uid-n", OK, func(o *Op) {
		o.ResourceVersion = "62"
		o.Approved = true
		o.Certificate = w.certC.pem
		o.AfterWrite = w.idx["nodeN"] + 1
	}))
	w.ops = b.ops

	w.cas = []CAObservation{
		obs("fault", "5", "", t0, w.k0, nil, nil, time.Time{}),
		obs("fault", "20", "Preparing", tPreparing, w.k0, nil, nil, time.Time{}),
		obs("fault", "21", "Preparing", tPreparing, w.k0, w.k1, nil, time.Time{}),
		obs("fault", "30", "Prepared", tPreparing.Add(time.Second), w.k1, nil, w.k0, time.Time{}),
		obs("fault", "40", "Completing", w.completedAt, w.k1, nil, w.k0, time.Time{}),
		obs("fault", "41", "Completing", w.completedAt, w.k1, nil, nil, time.Time{}),
		obs("fault", "50", "Completed", w.completedAt.Add(time.Second), w.k1, nil, nil, w.completedAt),
		// The same state from another replica.
		obs("fault", "50", "Completed", w.completedAt.Add(2*time.Second), w.k1, nil, nil, w.completedAt),
	}
	w.obsCompleted = 6

	w.final = Final{
		CSRs: []FinalCSR{
			{Name: "a", UID: "uid-a", SignerName: "example.com/fault", Approved: true, Certificate: w.certA.pem},
			{Name: "b", UID: "uid-b", SignerName: "example.com/fault", Approved: true, Certificate: w.certB.pem},
			{Name: "d", UID: "uid-d", SignerName: "example.com/fault", Approved: true, Certificate: w.certD.pem},
			{Name: "n", UID: "uid-n", SignerName: "rekey.io/kube-apiserver-client-kubelet", Approved: true, Certificate: w.certC.pem},
			{Name: "x", UID: "uid-x", SignerName: "example.com/fault", Denied: true},
		},
		// The records of a and d (key k0) were pruned at Complete.
		Records: []issuance.Record{
			w.certB.record("b", "uid-b"),
			w.certC.record("n", "uid-n"),
			w.unpublished.record("b", "uid-b"),
		},
		// The records watch saw every record written: those pruned too.
		RecordsEverWritten: []issuance.Record{
			w.certA.record("a", "uid-a"),
			w.certD.record("d", "uid-d"),
			w.unpublished.record("b", "uid-b"),
			w.certB.record("b", "uid-b"),
			w.certC.record("n", "uid-n"),
		},
		RecordsComplete: true,
		CAs:             []CAObservation{obs("fault", "50", "Completed", w.completedAt.Add(time.Minute), w.k1, nil, nil, w.completedAt)},
		CAKeys:          map[string][]*x509.Certificate{"fault": {w.k0.cert, w.k1.cert}},
	}
	for i, f := range w.final.CSRs {
		w.finalIdx[f.Name] = i
	}
	w.recIdx = map[string]int{"b": 0, "n": 1, "lost": 2}
	w.everIdx = map[string]int{"a": 0, "d": 1, "lost": 2, "b": 3, "n": 4}
	w.obsEnd = len(w.cas)
	return w
}

func (w *world) check() Report { return Check(w.ops, w.cas, w.final) }

// carry makes the acknowledged write labelled l come back with the
// certificate request name holds in the final state, as an approval that
// signs in its write does.
func (w *world) carry(l, name string) {
	w.op(l).Certificate = w.csr(name).Certificate
}

// op returns the op with label l, to change.
func (w *world) op(l string) *Op { return &w.ops[w.idx[l]] }

// csr returns the final request name, to change.
func (w *world) csr(name string) *FinalCSR { return &w.final.CSRs[w.finalIdx[name]] }

// addOp appends an op after every other.
func (w *world) addOp(kind Kind, replica int, object, uid string, outcome Outcome, mod func(*Op)) *Op {
	last := w.ops[len(w.ops)-1].End
	op := Op{ID: len(w.ops) + 1, Kind: kind, Replica: replica, Object: object, UID: uid,
		Start: last.Add(time.Second), End: last.Add(1100 * time.Millisecond), Outcome: outcome}
	if mod != nil {
		mod(&op)
	}
	w.ops = append(w.ops, op)
	return &w.ops[len(w.ops)-1]
}

// wantClean fails on any violation.
func wantClean(t *testing.T, r Report) {
	t.Helper()
	for _, v := range r.Violations {
		t.Errorf("unexpected violation %s: %s", v.Invariant, v.Detail)
	}
}

// wantOnly wants exactly n violations, all of invariant inv, each detail
// holding every one of the substrings.
func wantOnly(t *testing.T, r Report, inv string, n int, substrings ...string) {
	t.Helper()
	if len(r.Violations) != n {
		t.Errorf("got %d violations, want %d of %s", len(r.Violations), n, inv)
	}
	for _, v := range r.Violations {
		if v.Invariant != inv {
			t.Errorf("unexpected violation %s: %s", v.Invariant, v.Detail)
			continue
		}
		for _, s := range substrings {
			if !strings.Contains(v.Detail, s) {
				t.Errorf("violation %s: detail does not say %q: %s", v.Invariant, s, v.Detail)
			}
		}
		t.Logf("%s: %s", v.Invariant, v.Detail)
	}
}

// recordIndexes returns where the record labelled l is: its index in
// final.Records (-1: not there) and in final.RecordsEverWritten.
func (w *world) recordIndexes(l string) (final, ever int) {
	final, ever = -1, -1
	if i, ok := w.recIdx[l]; ok {
		final = i
	}
	if i, ok := w.everIdx[l]; ok {
		ever = i
	}
	return final, ever
}

// editRecord changes the record labelled l wherever it is.
func (w *world) editRecord(l string, edit func(*issuance.Record)) {
	f, e := w.recordIndexes(l)
	if f >= 0 {
		edit(&w.final.Records[f])
	}
	if e >= 0 {
		edit(&w.final.RecordsEverWritten[e])
	}
}

// replaceRecord puts r in the place of the record labelled l.
func (w *world) replaceRecord(l string, r issuance.Record) {
	w.editRecord(l, func(old *issuance.Record) { *old = r })
}

// dropRecord removes the record labelled l: it was never written.
func (w *world) dropRecord(l string) {
	f, e := w.recordIndexes(l)
	if f >= 0 {
		w.final.Records = append(w.final.Records[:f:f], w.final.Records[f+1:]...)
		shift(w.recIdx, f)
	}
	if e >= 0 {
		w.final.RecordsEverWritten = append(w.final.RecordsEverWritten[:e:e], w.final.RecordsEverWritten[e+1:]...)
		shift(w.everIdx, e)
	}
	delete(w.recIdx, l)
	delete(w.everIdx, l)
}

func shift(idx map[string]int, removed int) {
	for l, i := range idx {
		if i > removed {
			idx[l] = i - 1
		}
	}
}

// addRecord adds a record written over the run and still there at the
// end.
func (w *world) addRecord(r issuance.Record) {
	w.final.Records = append(w.final.Records, r)
	w.final.RecordsEverWritten = append(w.final.RecordsEverWritten, r)
}

// incomplete makes the record history incomplete: the records watch
// missed events, so the driver gives none.
func (w *world) incomplete() {
	w.final.RecordsEverWritten, w.final.RecordsComplete = nil, false
	w.everIdx = map[string]int{}
}
