package history

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/pkg/signing"
)

// timeSlack absorbs the second precision of x509 times and of API
// timestamps (status.lastCompletionTime): a time read back may be up to a
// second before the instant it stands for.
const timeSlack = time.Second

// Check checks the history (ops), the CA observations (cas) and the final
// state against every invariant. It is linear in the size of its inputs
// but for sorts.
func Check(ops []Op, cas []CAObservation, final Final) Report {
	c := newChecker(ops, cas, final)
	c.checkAcknowledgedApprovals()
	c.checkOneCertificatePerRequest()
	c.checkSerialUnique()
	c.checkRetiredKeys()
	c.checkDenied()
	c.checkRecords()
	c.checkSignedOncePerWrite()
	c.checkCAPhases()
	c.checkLinearizableReads()
	r := Report{OpsByKind: map[Kind]map[Outcome]int{}, UnpublishedSignatures: c.unpublished,
		RecordsComplete: final.RecordsComplete, RecordsUnchecked: c.recordsUnchecked}
	for _, op := range ops {
		if r.OpsByKind[op.Kind] == nil {
			r.OpsByKind[op.Kind] = map[Outcome]int{}
		}
		r.OpsByKind[op.Kind][op.Outcome]++
	}
	rank := map[string]int{}
	for i, inv := range Invariants {
		rank[inv] = i
	}
	sort.SliceStable(c.violations, func(i, j int) bool {
		a, b := c.violations[i], c.violations[j]
		if rank[a.Invariant] != rank[b.Invariant] {
			return rank[a.Invariant] < rank[b.Invariant]
		}
		return a.Detail < b.Detail
	})
	r.Violations = c.violations
	return r
}

// certInfo is one parsed leaf certificate.
type certInfo struct {
	leaf   *x509.Certificate
	sha    string // SHA-256 of the leaf's DER, lowercase hex (issuance.Record.SHA256)
	serial string // lowercase hex, no leading zeros (issuance.Record.Serial)
	aki    string // the signing key: hex of AuthorityKeyId
}

// sighting is one place a certificate was seen: an acknowledged response
// (opID > 0) or the final state (opID 0).
type sighting struct {
	name, uid string
	opID      int
	cert      *certInfo
}

// caKey is a CA certificate, by its key.
type caKey struct {
	ca   string
	cert *x509.Certificate
}

// retirement is when a CA key was retired at the latest (see
// findRetirements): at, and the observation that shows it.
type retirement struct {
	ca string
	at time.Time
	// how says which observation, and which of its times, gave at.
	how string
}

type checker struct {
	ops         []Op
	byID        map[int]*Op
	cas         []CAObservation // observations, then the final ones
	final       Final
	finalByName map[string]*FinalCSR
	// uids is every UID known for a name (ops, final).
	uids map[string]map[string]bool

	parsed    map[string]*certInfo // by PEM
	sightings []sighting
	bySHA     map[string][]int // sighting indexes by certificate SHA-256
	// unparseable reports each unparseable response once.
	unparseable map[string]bool

	// records is every issuance record known: Final.Records and
	// Final.RecordsEverWritten, each distinct record once.
	records  []issuance.Record
	recBySHA map[string][]int // record indexes by SHA256
	caKeys   map[string]caKey // CA certificates by key (SubjectKeyId hex)
	// keyIDs maps a key-store ID (issuance.Record.CAKeyID) to the key
	// (SubjectKeyId hex), from observations and matched records.
	keyIDs  map[string]string
	retired map[string]retirement
	// pruned holds keys whose records may have been deleted: retired, or
	// previous in a Completing observation (the records go before the
	// phase says Completed). It matters only when the record history is
	// incomplete.
	pruned map[string]bool
	// horizon is the latest time the inputs know of: a certificate that
	// expired before it may have had its record cleaned.
	horizon time.Time

	violations       []Violation
	unpublished      int
	recordsUnchecked int
}

func newChecker(ops []Op, cas []CAObservation, final Final) *checker {
	c := &checker{
		ops: ops, byID: make(map[int]*Op, len(ops)), final: final,
		cas:         append(append([]CAObservation(nil), cas...), final.CAs...),
		finalByName: map[string]*FinalCSR{}, uids: map[string]map[string]bool{},
		parsed: map[string]*certInfo{}, bySHA: map[string][]int{}, unparseable: map[string]bool{},
		recBySHA: map[string][]int{}, caKeys: map[string]caKey{}, keyIDs: map[string]string{},
		retired: map[string]retirement{}, pruned: map[string]bool{},
	}
	for i := range ops {
		op := &ops[i]
		c.byID[op.ID] = op
		if op.Outcome == OK && op.UID != "" && op.Object != "" && op.Kind != KindRotateStart && op.Kind != KindRotateComplete {
			c.addUID(op.Object, op.UID)
		}
		c.horizon = later(c.horizon, op.End)
	}
	for i := range final.CSRs {
		f := &final.CSRs[i]
		c.finalByName[f.Name] = f
		c.addUID(f.Name, f.UID)
	}
	for i := range ops {
		op := &ops[i]
		if op.Outcome != OK || len(op.Certificate) == 0 || op.Object == "" {
			continue
		}
		c.sight(op.Object, c.uidOf(op.Object, op.UID), op.ID, op.Certificate)
	}
	for _, f := range final.CSRs {
		if len(f.Certificate) > 0 {
			c.sight(f.Name, f.UID, 0, f.Certificate)
		}
	}
	c.records = distinctRecords(final.Records, final.RecordsEverWritten)
	for i, r := range c.records {
		if r.SHA256 != "" {
			c.recBySHA[r.SHA256] = append(c.recBySHA[r.SHA256], i)
		}
	}
	for name, certs := range final.CAKeys {
		for _, cert := range certs {
			c.addCAKey(name, cert)
		}
	}
	for _, o := range c.cas {
		c.horizon = later(c.horizon, o.Time)
		for _, k := range []struct {
			cert *x509.Certificate
			id   string
		}{{o.Current, o.CurrentKeyID}, {o.Next, o.NextKeyID}, {o.Previous, o.PreviousKeyID}} {
			if k.cert == nil {
				continue
			}
			c.addCAKey(o.Name, k.cert)
			if k.id != "" {
				c.keyIDs[k.id] = keyOf(k.cert)
			}
		}
	}
	c.learnKeyIDs()
	c.findRetirements()
	return c
}

// recordKey is an issuance record as a comparable value (time.Time is not
// one: its location and monotonic reading differ for the same instant).
type recordKey struct {
	serial, csrName, csrUID, requester, subject, holder, signerName, caName, caKeyID, sha256 string
	notBefore, notAfter                                                                      string
}

// distinctRecords returns the records of every list, each distinct record
// once (the record history repeats the final records, and a record put
// twice alike is one record), in the order first met.
func distinctRecords(lists ...[]issuance.Record) []issuance.Record {
	seen := map[recordKey]bool{}
	var out []issuance.Record
	for _, list := range lists {
		for _, r := range list {
			k := recordKey{r.Serial, r.CSRName, r.CSRUID, r.Requester, r.Subject, r.Holder, r.SignerName, r.CAName, r.CAKeyID,
				r.SHA256, r.NotBefore.UTC().Format(time.RFC3339Nano), r.NotAfter.UTC().Format(time.RFC3339Nano)}
			if seen[k] {
				continue
			}
			seen[k] = true
			out = append(out, r)
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (c *checker) addUID(name, uid string) {
	if uid == "" {
		return
	}
	if c.uids[name] == nil {
		c.uids[name] = map[string]bool{}
	}
	c.uids[name][uid] = true
}

// uidOf is the UID an op or sighting refers to: its own when known, else
// the name's only UID, else "" (the request's lifetime is unknown).
func (c *checker) uidOf(name, uid string) string {
	if uid != "" {
		return uid
	}
	if len(c.uids[name]) == 1 {
		for u := range c.uids[name] {
			return u
		}
	}
	return ""
}

func (c *checker) addCAKey(name string, cert *x509.Certificate) {
	k := keyOf(cert)
	if _, ok := c.caKeys[k]; !ok {
		c.caKeys[k] = caKey{ca: name, cert: cert}
	}
}

// keyOf names a CA certificate's key as leaves name it (AuthorityKeyId).
func keyOf(cert *x509.Certificate) string {
	if len(cert.SubjectKeyId) > 0 {
		return hex.EncodeToString(cert.SubjectKeyId)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "spki-sha256:" + hex.EncodeToString(sum[:])
}

// sight records a certificate seen for a request; a certificate that does
// not parse is a violation of its own, reported once per response.
func (c *checker) sight(name, uid string, opID int, pemBytes []byte) {
	info, ok := c.parsed[string(pemBytes)]
	if !ok {
		var err error
		info, err = parseLeaf(pemBytes)
		if err != nil {
			c.add(InvUnparseable, "request %s (uid %s): %s returned a status.certificate whose leaf does not parse: %v (%d bytes, starting %q)",
				name, uidText(uid), c.source(opID), err, len(pemBytes), prefix(string(pemBytes), 40))
		}
		c.parsed[string(pemBytes)] = info
	}
	if info == nil {
		return
	}
	c.sightings = append(c.sightings, sighting{name: name, uid: uid, opID: opID, cert: info})
	c.bySHA[info.sha] = append(c.bySHA[info.sha], len(c.sightings)-1)
}

func parseLeaf(pemBytes []byte) (*certInfo, error) {
	rest := pemBytes
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("no CERTIFICATE PEM block")
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(leaf.Raw)
		info := &certInfo{leaf: leaf, sha: hex.EncodeToString(sum[:]), serial: leaf.SerialNumber.Text(16)}
		if len(leaf.AuthorityKeyId) > 0 {
			info.aki = hex.EncodeToString(leaf.AuthorityKeyId)
		} else {
			// No AKI: the issuer's name stands in for its key.
			info.aki = "issuer:" + leaf.Issuer.String()
		}
		return info, nil
	}
}

// learnKeyIDs maps each record's CAKeyID to the key that signed the
// certificate it describes, where a client saw that certificate; a key ID
// that maps to two keys is a violation.
func (c *checker) learnKeyIDs() {
	learned := map[string]map[string][]string{} // keyID -> aki -> certificate SHAs
	for sha, recs := range c.recBySHA {
		idx := c.bySHA[sha]
		if len(idx) == 0 {
			continue
		}
		cert := c.sightings[idx[0]].cert
		for _, ri := range recs {
			id := c.records[ri].CAKeyID
			if id == "" {
				continue
			}
			if learned[id] == nil {
				learned[id] = map[string][]string{}
			}
			learned[id][cert.aki] = append(learned[id][cert.aki], sha)
		}
	}
	for _, id := range sortedKeys(learned) {
		akis := learned[id]
		if _, ok := c.keyIDs[id]; ok {
			// The CA status names the key: checkRecords reports each
			// certificate whose record names another.
			continue
		}
		if len(akis) > 1 {
			var parts []string
			for _, aki := range sortedKeys(akis) {
				parts = append(parts, fmt.Sprintf("key %s (certificate %s)", short(aki), short(akis[aki][0])))
			}
			c.add(InvRecords, "records naming CA key ID %s describe certificates signed by different keys: %s", id, strings.Join(parts, ", "))
			continue
		}
		for aki := range akis {
			c.keyIDs[id] = aki
		}
	}
}

// caOrder returns each CA's observations in resourceVersion order
// (observations whose resourceVersion does not parse are left out).
func (c *checker) caOrder() map[string][]CAObservation {
	by := map[string][]CAObservation{}
	for _, o := range c.cas {
		if _, err := strconv.ParseInt(o.ResourceVersion, 10, 64); err != nil {
			continue
		}
		by[o.Name] = append(by[o.Name], o)
	}
	for _, obs := range by {
		sort.SliceStable(obs, func(i, j int) bool { return rvInt(obs[i].ResourceVersion) < rvInt(obs[j].ResourceVersion) })
	}
	return by
}

func rvInt(rv string) int64 {
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// findRetirements finds, for each CA key, a time by which it was surely
// retired (destroyed, its records pruned), as early as the observations
// allow: Tc. A rotation's Complete destroys the previous key, prunes its
// records, and only then writes a status without it; so once an
// observation (in resourceVersion order, after one that listed the key)
// lists the key neither as current, next nor previous, every observation
// from there on is of a state written after the key was destroyed, and
// each bounds the destruction from above with its Time (when the
// observer saw it) and, when its phase is Completed, its
// lastCompletionTime (of that completion or a later one). Tc is the
// earliest of those bounds. Taking the first Completed observation
// instead would let a missed Completed status push Tc to a later
// rotation's. Observations without a current key (no status yet) say
// nothing.
//
// Only the times the observations were seen bound it: the CA controller
// takes status.lastCompletionTime when its Complete step begins, before
// it destroys the key, so that time is not an upper bound of the
// destruction.
func (c *checker) findRetirements() {
	byCA := c.caOrder()
	for _, name := range sortedKeys(byCA) {
		var obs []CAObservation
		for _, o := range byCA[name] {
			if o.Current != nil {
				obs = append(obs, o)
			}
		}
		// bound[i]: the earliest time the observations from i on give, and
		// which gave it (ties go to the earliest in resourceVersion order).
		type bound struct {
			at  time.Time
			how string
		}
		bounds := make([]bound, len(obs)+1)
		for i := len(obs) - 1; i >= 0; i-- {
			b := bounds[i+1]
			o := obs[i]
			if !o.Time.IsZero() && (b.at.IsZero() || !o.Time.After(b.at)) {
				b = bound{o.Time, fmt.Sprintf("when the CA's status at resourceVersion %s (phase %s) was seen", o.ResourceVersion, o.Phase)}
			}
			bounds[i] = b
		}
		// listed: the keys the previous observation listed; once an
		// observation drops one, it is retired.
		listed := map[string]bool{}
		for i, o := range obs {
			if o.Phase == "Completing" && o.Previous != nil {
				c.pruned[keyOf(o.Previous)] = true
			}
			live := map[string]bool{}
			for _, k := range []*x509.Certificate{o.Current, o.Next, o.Previous} {
				if k != nil {
					live[keyOf(k)] = true
				}
			}
			for _, k := range sortedKeys(listed) {
				if live[k] {
					continue
				}
				c.pruned[k] = true
				if _, done := c.retired[k]; !done && !bounds[i].at.IsZero() {
					c.retired[k] = retirement{ca: name, at: bounds[i].at, how: bounds[i].how}
				}
			}
			listed = live
		}
	}
	// A key of a CA that its final state no longer lists may have had its
	// records pruned, even if no observation caught the step that did it.
	for _, f := range c.final.CAs {
		live := map[string]bool{}
		for _, k := range []*x509.Certificate{f.Current, f.Next, f.Previous} {
			if k != nil {
				live[keyOf(k)] = true
			}
		}
		for _, cert := range c.final.CAKeys[f.Name] {
			if k := keyOf(cert); !live[k] {
				c.pruned[k] = true
			}
		}
	}
}

// checkAcknowledgedApprovals: every acknowledged approval, NodeClient
// create and create answered approved leaves the request, at the end,
// approved and holding a certificate. That every certificate seen for it
// is that same one is checked, for every request, by
// checkOneCertificatePerRequest (a request with two is reported there
// once, not twice).
func (c *checker) checkAcknowledgedApprovals() {
	type ack struct {
		uid string
		ops []int
	}
	acks := map[string]*ack{}
	for _, op := range c.ops {
		if op.Outcome != OK || op.Object == "" {
			continue
		}
		if op.Kind != KindApprove && op.Kind != KindNodeClient && (op.Kind != KindCreate || !op.Approved) {
			continue
		}
		uid := c.uidOf(op.Object, op.UID)
		a := acks[op.Object]
		if a == nil {
			a = &ack{uid: uid}
			acks[op.Object] = a
		}
		if a.uid == "" {
			a.uid = uid
		}
		a.ops = append(a.ops, op.ID)
	}
	for _, name := range sortedKeys(acks) {
		a := acks[name]
		what := func() string {
			return fmt.Sprintf("request %s (uid %s): approval acknowledged by %s", name, uidText(a.uid), c.sources(a.ops))
		}
		f := c.finalByName[name]
		switch {
		case f == nil:
			c.add(InvAcknowledgedApproval, "%s, but the request is absent at the end (the load deletes nothing)", what())
		case a.uid != "" && f.UID != a.uid:
			c.add(InvAcknowledgedApproval, "%s, but at the end the request %s has uid %s (the load deletes nothing)", what(), name, f.UID)
		case !f.Approved || f.Denied:
			c.add(InvAcknowledgedApproval, "%s, but at the end it is not approved (approved=%t denied=%t failed=%t)", what(), f.Approved, f.Denied, f.Failed)
		case len(f.Certificate) == 0:
			c.add(InvAcknowledgedApproval, "%s, but at the end it holds no certificate (failed=%t)", what(), f.Failed)
		}
	}
}

// checkOneCertificatePerRequest: a request (name and UID) holds one
// certificate over its lifetime: every response and the final state show
// the same one, if any.
func (c *checker) checkOneCertificatePerRequest() {
	certs := map[reqKey]map[string][]int{} // request -> SHA -> sightings
	for i, s := range c.sightings {
		if s.uid == "" {
			continue // its lifetime is unknown
		}
		k := reqKey{s.name, s.uid}
		if certs[k] == nil {
			certs[k] = map[string][]int{}
		}
		certs[k][s.cert.sha] = append(certs[k][s.cert.sha], i)
	}
	keys := make([]reqKey, 0, len(certs))
	for k, m := range certs {
		if len(m) > 1 {
			keys = append(keys, k)
		}
	}
	sortReqKeys(keys)
	for _, k := range keys {
		var parts []string
		for _, sha := range sortedKeys(certs[k]) {
			idx := certs[k][sha]
			parts = append(parts, fmt.Sprintf("certificate %s (serial %s) seen in %s", short(sha), c.sightings[idx[0]].cert.serial, c.sightingSources(idx)))
		}
		c.add(InvOneCertificate, "request %s (uid %s) had %d different certificates: %s", k.name, k.uid, len(certs[k]), strings.Join(parts, "; "))
	}
}

// checkSerialUnique: one CA key never issues one serial twice: a (key,
// serial) pair names one certificate across responses, the final state
// and the records.
func (c *checker) checkSerialUnique() {
	type keySerial struct{ key, serial string }
	// where: a sighting index, or -1-i for record i.
	certs := map[keySerial]map[string]int{} // -> SHA -> where first seen
	note := func(k keySerial, sha string, where int) {
		if certs[k] == nil {
			certs[k] = map[string]int{}
		}
		if _, ok := certs[k][sha]; !ok {
			certs[k][sha] = where
		}
	}
	describe := func(where int) string {
		if where < 0 {
			r := c.records[-1-where]
			return fmt.Sprintf("the issuance record of request %s (uid %s)", r.CSRName, uidText(r.CSRUID))
		}
		s := c.sightings[where]
		return fmt.Sprintf("request %s (uid %s) in %s", s.name, uidText(s.uid), c.source(s.opID))
	}
	for i, s := range c.sightings {
		note(keySerial{s.cert.aki, s.cert.serial}, s.cert.sha, i)
	}
	for i, r := range c.records {
		if r.SHA256 == "" {
			continue
		}
		key, ok := c.keyIDs[r.CAKeyID]
		if !ok {
			continue
		}
		note(keySerial{key, r.Serial}, r.SHA256, -1-i)
	}
	keys := make([]keySerial, 0)
	for k, m := range certs {
		if len(m) > 1 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].key != keys[j].key {
			return keys[i].key < keys[j].key
		}
		return keys[i].serial < keys[j].serial
	})
	for _, k := range keys {
		var parts []string
		for _, sha := range sortedKeys(certs[k]) {
			parts = append(parts, fmt.Sprintf("certificate %s (%s)", short(sha), describe(certs[k][sha])))
		}
		c.add(InvSerialUnique, "CA key %s%s issued serial %s to %d different certificates: %s", short(k.key), c.caNameOf(k.key), k.serial, len(certs[k]), strings.Join(parts, "; "))
	}
}

// checkRetiredKeys: no certificate is signed by a CA key after the
// rotation that retired it completed (Tc, findRetirements). The signing
// time is at least the certificate's NotBefore plus signing.Backdate
// (NotBefore is whole seconds, cut down); a NotBefore clamped to the CA
// certificate's NotBefore says nothing of the signing time and is
// skipped. Records count too, those pruned since included: a record is
// written only before its certificate is published, under the signing
// fence.
func (c *checker) checkRetiredKeys() {
	check := func(key string, notBefore time.Time, what func() string) {
		ret, ok := c.retired[key]
		if !ok {
			return
		}
		if ca, ok := c.caKeys[key]; ok && !notBefore.After(ca.cert.NotBefore.Add(timeSlack)) {
			return // clamped to the CA's NotBefore: the signing time is unknown
		}
		signed := notBefore.Add(signing.Backdate)
		if signed.After(ret.at.Add(timeSlack)) {
			c.add(InvRetiredKey, "%s was signed by key %s of CA %s at %s or later (NotBefore %s + %s), but the rotation that retired the key completed by %s (%s)",
				what(), short(key), ret.ca, stamp(signed), stamp(notBefore), signing.Backdate, stamp(ret.at), ret.how)
		}
	}
	for _, sha := range sortedKeys(c.bySHA) {
		idx := c.bySHA[sha]
		s := c.sightings[idx[0]]
		check(s.cert.aki, s.cert.leaf.NotBefore, func() string {
			return fmt.Sprintf("certificate %s (serial %s) of request %s (uid %s), seen in %s",
				short(sha), s.cert.serial, s.name, uidText(s.uid), c.sightingSources(idx))
		})
	}
	for _, r := range c.records {
		if len(c.bySHA[r.SHA256]) > 0 {
			continue // checked as a certificate
		}
		key, ok := c.keyIDs[r.CAKeyID]
		if !ok {
			continue
		}
		check(key, r.NotBefore, func() string {
			return fmt.Sprintf("the certificate of issuance record serial %s (sha %s) of request %s (uid %s), never published,",
				r.Serial, short(r.SHA256), r.CSRName, uidText(r.CSRUID))
		})
	}
}

// checkDenied: a denied request never gets a certificate (in any response,
// the final state, or a record), and an acknowledged denial leaves the
// request denied at the end.
func (c *checker) checkDenied() {
	denied := map[reqKey][]string{} // -> why it is known denied
	for _, op := range c.ops {
		if op.Outcome != OK || op.Object == "" {
			continue
		}
		uid := c.uidOf(op.Object, op.UID)
		if uid == "" {
			continue
		}
		k := reqKey{op.Object, uid}
		switch {
		case op.Kind == KindDeny:
			denied[k] = append(denied[k], fmt.Sprintf("denial acknowledged by op %d", op.ID))
		case op.Denied && op.Kind != KindRotateStart && op.Kind != KindRotateComplete:
			denied[k] = append(denied[k], fmt.Sprintf("op %d answered denied", op.ID))
		}
	}
	for _, f := range c.final.CSRs {
		if f.Denied {
			k := reqKey{f.Name, f.UID}
			denied[k] = append(denied[k], "denied at the end")
		}
	}
	certsOf := map[reqKey][]int{}
	for i, s := range c.sightings {
		k := reqKey{s.name, s.uid}
		if _, ok := denied[k]; ok {
			certsOf[k] = append(certsOf[k], i)
		}
	}
	recsOf := map[reqKey][]int{}
	for i, r := range c.records {
		k := reqKey{r.CSRName, r.CSRUID}
		if _, ok := denied[k]; ok {
			recsOf[k] = append(recsOf[k], i)
		}
	}
	keys := make([]reqKey, 0, len(denied))
	for k := range denied {
		keys = append(keys, k)
	}
	sortReqKeys(keys)
	for _, k := range keys {
		why := strings.Join(firstN(denied[k], 3), ", ")
		if idx := certsOf[k]; len(idx) > 0 {
			bySHA := map[string][]int{}
			for _, i := range idx {
				bySHA[c.sightings[i].cert.sha] = append(bySHA[c.sightings[i].cert.sha], i)
			}
			var parts []string
			for _, sha := range sortedKeys(bySHA) {
				parts = append(parts, fmt.Sprintf("certificate %s (serial %s) in %s", short(sha), c.sightings[bySHA[sha][0]].cert.serial, c.sightingSources(bySHA[sha])))
			}
			c.add(InvDenied, "request %s (uid %s) is denied (%s) but has %s", k.name, k.uid, why, strings.Join(parts, "; "))
		}
		if idx := recsOf[k]; len(idx) > 0 {
			var parts []string
			for _, i := range idx {
				r := c.records[i]
				if len(c.bySHA[r.SHA256]) > 0 {
					continue // reported above
				}
				parts = append(parts, fmt.Sprintf("serial %s (sha %s, CA %s)", r.Serial, short(r.SHA256), r.CAName))
			}
			if len(parts) > 0 {
				c.add(InvDenied, "request %s (uid %s) is denied (%s) but was signed: issuance records %s", k.name, k.uid, why, strings.Join(parts, ", "))
			}
		}
	}
	// An acknowledged denial: the request ends denied.
	acked := map[string][]int{}
	ackUID := map[string]string{}
	for _, op := range c.ops {
		if op.Outcome == OK && op.Kind == KindDeny && op.Object != "" {
			acked[op.Object] = append(acked[op.Object], op.ID)
			if uid := c.uidOf(op.Object, op.UID); uid != "" {
				ackUID[op.Object] = uid
			}
		}
	}
	for _, name := range sortedKeys(acked) {
		uid := ackUID[name]
		what := func() string {
			return fmt.Sprintf("request %s (uid %s): denial acknowledged by %s", name, uidText(uid), c.sources(acked[name]))
		}
		f := c.finalByName[name]
		switch {
		case f == nil:
			c.add(InvDenied, "%s, but the request is absent at the end (the load deletes nothing)", what())
		case uid != "" && f.UID != uid:
			c.add(InvDenied, "%s, but at the end the request %s has uid %s (the load deletes nothing)", what(), name, f.UID)
		case !f.Denied:
			c.add(InvDenied, "%s, but at the end it is not denied (approved=%t failed=%t, certificate %t)", what(), f.Approved, f.Failed, len(f.Certificate) > 0)
		}
	}
}

// checkRecords: every certificate seen has an issuance record (among the
// final records and those written over the run) with its SHA-256,
// request, serial and CA key; every record describes a certificate seen,
// or is an unpublished signature (the request does not hold it and no
// client saw it: counted here, bounded by checkSignedOncePerWrite).
//
// When the record history is complete, every record ever written is
// known, so a certificate without one is a violation whatever became of
// its key. When it is not, a record may have been deleted unseen: of a
// retired key (pruned at Complete) or of an expired certificate (the
// cleaner); such certificates are let pass, and counted.
func (c *checker) checkRecords() {
	for _, sha := range sortedKeys(c.bySHA) {
		idx := c.bySHA[sha]
		s := c.sightings[idx[0]]
		what := func() string {
			return fmt.Sprintf("certificate %s (serial %s, key %s) of request %s (uid %s), seen in %s",
				short(sha), s.cert.serial, short(s.cert.aki), s.name, uidText(s.uid), c.sightingSources(idx))
		}
		recs := c.recBySHA[sha]
		if len(recs) == 0 {
			if !c.final.RecordsComplete {
				if c.pruned[s.cert.aki] || s.cert.leaf.NotAfter.Before(c.horizon) {
					c.recordsUnchecked++
					continue
				}
				c.add(InvRecords, "%s has no issuance record (the record history is incomplete, but the key was not retired and the certificate has not expired)", what())
				continue
			}
			c.add(InvRecords, "%s has no issuance record, and none was ever written (the record history is complete)", what())
			continue
		}
		r := c.records[recs[0]]
		var bad []string
		// Every request the certificate was seen for must be the record's.
		others := map[string]bool{}
		for _, i := range idx {
			o := c.sightings[i]
			if o.name != r.CSRName || (o.uid != "" && o.uid != r.CSRUID) {
				others[fmt.Sprintf("%s (uid %s)", o.name, uidText(o.uid))] = true
			}
		}
		if len(others) > 0 {
			bad = append(bad, fmt.Sprintf("the record names request %s (uid %s), the certificate was seen for %s", r.CSRName, uidText(r.CSRUID), strings.Join(sortedKeys(others), ", ")))
		}
		if r.Serial != s.cert.serial {
			bad = append(bad, fmt.Sprintf("the record's serial is %s", r.Serial))
		}
		if key, ok := c.keyIDs[r.CAKeyID]; ok && key != s.cert.aki {
			bad = append(bad, fmt.Sprintf("the record's CA key ID %s is key %s", r.CAKeyID, short(key)))
		}
		if ca, ok := c.caKeys[s.cert.aki]; ok && r.CAName != ca.ca {
			bad = append(bad, fmt.Sprintf("the record names CA %s, the signing key is CA %s's", r.CAName, ca.ca))
		}
		if len(recs) > 1 {
			bad = append(bad, fmt.Sprintf("%d records hold its SHA-256", len(recs)))
		}
		if len(bad) > 0 {
			c.add(InvRecords, "%s: %s", what(), strings.Join(bad, "; "))
		}
	}
	for _, r := range c.records {
		if r.SHA256 == "" || len(c.bySHA[r.SHA256]) == 0 {
			c.unpublished++
		}
	}
}

// checkSignedOncePerWrite: a request (name and UID) has at most 1 + w
// issuance records, w being the writes on it (create, approval, NodeClient
// create) whose outcome was not acknowledged. A write signs at most once
// (the server's conflict retry reuses what it signed); an acknowledged one
// publishes what it signed; the leader's signer controller signs only a
// stored approval without a certificate. So one signature is the
// published one, and each other needs a write that may have signed and
// lost: failed (a conflict after the signature) or of unknown outcome. A
// write without a UID counts for every request of its name.
func (c *checker) checkSignedOncePerWrite() {
	// recs: per request, one record per certificate (two records that
	// disagree on one certificate are checkRecords' to report).
	recs := map[reqKey][]int{}
	signatures := map[string]bool{}
	for i, r := range c.records {
		if r.CSRUID == "" {
			continue // a record of before UIDs were kept: its request is unknown
		}
		k := reqKey{r.CSRName, r.CSRUID}
		sig := k.name + "\x00" + k.uid + "\x00" + r.SHA256
		if r.SHA256 == "" {
			sig += "\x00" + r.CAName + "\x00" + r.Serial
		}
		if signatures[sig] {
			continue
		}
		signatures[sig] = true
		recs[k] = append(recs[k], i)
	}
	// writesOf: the write ops by name and UID ("": unknown, counted for
	// every request of the name), in ID order.
	writesOf := map[reqKey][]int{}
	for i, op := range c.ops {
		if op.Kind == KindCreate || op.Kind == KindApprove || op.Kind == KindNodeClient {
			k := reqKey{op.Object, op.UID}
			writesOf[k] = append(writesOf[k], i)
		}
	}
	keys := make([]reqKey, 0, len(recs))
	for k, idx := range recs {
		if len(idx) > 1 {
			keys = append(keys, k)
		}
	}
	sortReqKeys(keys)
	for _, k := range keys {
		var writes []string
		lost := 0
		idx := append(append([]int(nil), writesOf[k]...), writesOf[reqKey{k.name, ""}]...)
		sort.Ints(idx)
		carried := false
		for _, i := range idx {
			op := &c.ops[i]
			if op.Outcome != OK {
				lost++
			} else if len(op.Certificate) > 0 {
				carried = true
			}
			writes = append(writes, fmt.Sprintf("op %d (%s on replica %d, %s–%s, %s)", op.ID, op.Kind, op.Replica, stamp(op.Start), stamp(op.End), op.Outcome))
		}
		// A request no acknowledged write came back signed from was
		// stored approved without its certificate (the write's signature
		// failed, e.g. its record's etcd write timed out with an unknown
		// outcome): the leader's signer controller signs it once more.
		controller := 0
		if !carried {
			controller = 1
		}
		n := len(recs[k])
		if n <= 1+lost+controller {
			continue
		}
		serials := make([]string, 0, n)
		for _, i := range recs[k] {
			r := c.records[i]
			serials = append(serials, fmt.Sprintf("serial %s (CA %s, sha %s)", r.Serial, r.CAName, short(r.SHA256)))
		}
		sort.Strings(serials)
		ws := "none"
		if len(writes) > 0 {
			ws = strings.Join(writes, ", ")
		}
		by := ""
		if controller > 0 {
			by = " + 1 by the signer controller, no acknowledged write having come back signed"
		}
		c.add(InvSignedOncePerWrite, "request %s (uid %s) was signed %d times (issuance records %s), but its writes account for at most %d (1 + %d not acknowledged%s); writes on it: %s",
			k.name, k.uid, n, strings.Join(serials, ", "), 1+lost+controller, lost, by, ws)
	}
}

// phasePosition orders a CA's states along its rotations: (the ordinal of
// the key that signs or is about to, step). A rotation from key n to n+1
// goes (n, Completed=0) → (n, Preparing=1) → (n+1, promoted=-3) → (n+1,
// Prepared=-2) → (n+1, Completing=-1) → (n+1, Completed=0).
type phasePosition struct{ key, step int }

func (p phasePosition) less(q phasePosition) bool {
	if p.key != q.key {
		return p.key < q.key
	}
	return p.step < q.step
}

// checkCAPhases: in resourceVersion order a CA's phase only moves forward
// (Completed → Preparing → Prepared → Completing → Completed; the
// observer may miss steps), one resourceVersion is one state, and the
// final phase agrees with the last acknowledged rotation action when no
// other action may have followed it.
func (c *checker) checkCAPhases() {
	byCA := c.caOrder()
	for _, name := range sortedKeys(byCA) {
		ord := map[string]int{}
		ordinal := func(cert *x509.Certificate) int {
			k := keyOf(cert)
			if n, ok := ord[k]; ok {
				return n
			}
			ord[k] = len(ord) + 1
			return ord[k]
		}
		var prev *CAObservation
		var prevPos phasePosition
		obs := byCA[name]
		for i := range obs {
			o := &obs[i]
			for _, k := range []*x509.Certificate{o.Previous, o.Current, o.Next} {
				if k != nil {
					ordinal(k)
				}
			}
			if prev != nil && prev.ResourceVersion == o.ResourceVersion {
				if prev.Phase != o.Phase || !sameKey(prev.Current, o.Current) || !sameKey(prev.Next, o.Next) || !sameKey(prev.Previous, o.Previous) {
					c.add(InvCAPhase, "CA %s: two different states at resourceVersion %s: %s (seen %s) and %s (seen %s)",
						name, o.ResourceVersion, c.caState(prev), stamp(prev.Time), c.caState(o), stamp(o.Time))
				}
				continue
			}
			if o.Current == nil {
				continue
			}
			var pos phasePosition
			switch o.Phase {
			case "", "Completed":
				pos = phasePosition{ordinal(o.Current), 0}
			case "Preparing":
				pos = phasePosition{ordinal(o.Current), 1}
				if o.Previous != nil {
					// Promoted before status said Prepared (a step
					// interrupted): the new key is current already.
					pos.step = -3
				}
			case "Prepared":
				pos = phasePosition{ordinal(o.Current), -2}
			case "Completing":
				pos = phasePosition{ordinal(o.Current), -1}
			default:
				continue
			}
			if prev != nil && pos.less(prevPos) {
				c.add(InvCAPhase, "CA %s went back: %s at resourceVersion %s (seen %s), then %s at resourceVersion %s (seen %s)",
					name, c.caState(prev), prev.ResourceVersion, stamp(prev.Time), c.caState(o), o.ResourceVersion, stamp(o.Time))
			}
			prev, prevPos = o, pos
		}
	}
	c.checkFinalPhases()
}

func sameKey(a, b *x509.Certificate) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return keyOf(a) == keyOf(b)
}

func (c *checker) caState(o *CAObservation) string {
	phase := o.Phase
	if phase == "" {
		phase = `""`
	}
	s := fmt.Sprintf("phase %s", phase)
	for _, k := range []struct {
		what string
		cert *x509.Certificate
	}{{"current", o.Current}, {"next", o.Next}, {"previous", o.Previous}} {
		if k.cert != nil {
			s += fmt.Sprintf(" %s %s", k.what, short(keyOf(k.cert)))
		}
	}
	return s
}

// checkFinalPhases: the last acknowledged rotation action decides the
// final phase (Complete: Completed, or Completing, which the controller
// finishes on its own and the snapshot does not wait for; Start: Preparing
// or Prepared) when it
// is surely the last: every other acknowledged action ended before it
// started, and no action of the other kind has an unknown outcome (a
// replica paused holding one may apply it at any later time; one of the
// same kind would be refused).
func (c *checker) checkFinalPhases() {
	finalCA := map[string]*CAObservation{}
	for i := range c.final.CAs {
		finalCA[c.final.CAs[i].Name] = &c.final.CAs[i]
	}
	byCA := map[string][]*Op{}
	for i := range c.ops {
		op := &c.ops[i]
		if (op.Kind == KindRotateStart || op.Kind == KindRotateComplete) && op.Outcome != Failed {
			byCA[op.Object] = append(byCA[op.Object], op)
		}
	}
	for _, name := range sortedKeys(byCA) {
		f := finalCA[name]
		if f == nil {
			continue
		}
		var last *Op
		for _, op := range byCA[name] {
			if op.Outcome == OK && (last == nil || op.End.After(last.End)) {
				last = op
			}
		}
		if last == nil {
			continue
		}
		decided := true
		for _, op := range byCA[name] {
			if op == last {
				continue
			}
			if op.Outcome == OK && !op.End.Before(last.Start) {
				decided = false // overlaps the last: either may have gone last
			}
			if op.Outcome == Unknown && op.Kind != last.Kind {
				decided = false
			}
		}
		if !decided {
			continue
		}
		var want []string
		if last.Kind == KindRotateComplete {
			want = []string{"Completed", "Completing"}
		} else {
			want = []string{"Preparing", "Prepared"}
		}
		ok := false
		for _, w := range want {
			ok = ok || f.Phase == w
		}
		if !ok {
			c.add(InvCAPhase, "CA %s: the last rotation action, %s, was acknowledged by %s and no other may have followed it, but at the end the phase is %q (want %s; resourceVersion %s)",
				name, last.Kind, c.source(last.ID), f.Phase, strings.Join(want, " or "), f.ResourceVersion)
		}
	}
}

// checkLinearizableReads: a read that started after an acknowledged write
// ended sees the write: the object exists, approved after an approval (or
// a response that said approved), denied after a denial, with a
// certificate when the write's response had one, at a resourceVersion no
// older than the write's.
func (c *checker) checkLinearizableReads() {
	for _, g := range c.ops {
		if g.Kind != KindGet || g.AfterWrite == 0 {
			continue
		}
		w, ok := c.byID[g.AfterWrite]
		if !ok || w.Outcome != OK || w.Object != g.Object || g.Start.Before(w.End) {
			continue
		}
		what := func() string {
			return fmt.Sprintf("read op %d of %s (replica %d, %s–%s) after write op %d (%s on replica %d, acknowledged %s, resourceVersion %s)",
				g.ID, g.Object, g.Replica, stamp(g.Start), stamp(g.End), w.ID, w.Kind, w.Replica, stamp(w.End), w.ResourceVersion)
		}
		switch g.Outcome {
		case Unknown:
			continue
		case Failed:
			if g.Reason == "NotFound" {
				c.add(InvLinearizableRead, "%s: the object was not found (%s)", what(), g.Err)
			}
			continue
		}
		var missing []string
		if (w.Kind == KindApprove || w.Approved) && !g.Approved {
			missing = append(missing, "not approved")
		}
		if (w.Kind == KindDeny || w.Denied) && !g.Denied {
			missing = append(missing, "not denied")
		}
		if len(w.Certificate) > 0 && len(g.Certificate) == 0 {
			missing = append(missing, "no certificate")
		}
		if w.UID != "" && g.UID != "" && w.UID != g.UID {
			missing = append(missing, fmt.Sprintf("uid %s, the write's was %s", g.UID, w.UID))
		}
		wrv, werr := strconv.ParseInt(w.ResourceVersion, 10, 64)
		grv, gerr := strconv.ParseInt(g.ResourceVersion, 10, 64)
		if werr == nil && gerr == nil && grv < wrv {
			missing = append(missing, fmt.Sprintf("resourceVersion %d older than the write's", grv))
		}
		if len(missing) > 0 {
			c.add(InvLinearizableRead, "%s saw %s", what(), strings.Join(missing, ", "))
		}
	}
}

func (c *checker) add(invariant, format string, args ...any) {
	c.violations = append(c.violations, Violation{Invariant: invariant, Detail: fmt.Sprintf(format, args...)})
}

// source describes where something was seen: an op, or the final state.
func (c *checker) source(opID int) string {
	if opID == 0 {
		return "the final state"
	}
	op, ok := c.byID[opID]
	if !ok {
		return fmt.Sprintf("op %d", opID)
	}
	return fmt.Sprintf("op %d (%s on replica %d, %s–%s)", op.ID, op.Kind, op.Replica, stamp(op.Start), stamp(op.End))
}

// sources describes a few ops and counts the rest.
func (c *checker) sources(opIDs []int) string {
	var parts []string
	for _, id := range firstN(opIDs, 3) {
		parts = append(parts, c.source(id))
	}
	if len(opIDs) > 3 {
		parts = append(parts, fmt.Sprintf("%d more", len(opIDs)-3))
	}
	return strings.Join(parts, ", ")
}

func (c *checker) sightingSources(idx []int) string {
	ids := make([]int, 0, len(idx))
	for _, i := range idx {
		ids = append(ids, c.sightings[i].opID)
	}
	return c.sources(ids)
}

func (c *checker) caNameOf(key string) string {
	if ca, ok := c.caKeys[key]; ok {
		return " of CA " + ca.ca
	}
	return ""
}

func firstN[T any](s []T, n int) []T {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// short is the first 16 characters of a hash: enough to grep for.
func short(s string) string { return prefix(s, 16) }

func prefix(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func uidText(uid string) string {
	if uid == "" {
		return "unknown"
	}
	return uid
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "(no time)"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// reqKey is one request lifetime: its name and UID.
type reqKey struct{ name, uid string }

// sortReqKeys orders requests by name, then UID, so that a report lists
// them the same way every time.
func sortReqKeys(keys []reqKey) {
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].name != keys[j].name {
			return keys[i].name < keys[j].name
		}
		return keys[i].uid < keys[j].uid
	})
}
