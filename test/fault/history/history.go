// Package history records the operations the fault suite's load sends
// (what was asked, of which replica, when, and what came back) and checks
// the recorded history, with the CA observations and the final state,
// against rekey's invariants: an acknowledged approval ends with one
// certificate, a request never holds two, no serial is issued twice by one
// CA key, no retired key signs, a denied request gets no certificate, the
// issuance records match the certificates (every record ever written, when
// the driver saw them all), a request is signed no more often than its
// writes allow, a CA's rotation phases only move forward, and a read after
// an acknowledged write sees it.
//
// The checker is pure: it reads the history and the final state, and
// reports violations that name the invariant and what a human needs to
// find the cause (request, UID, serials, certificate hashes, op IDs,
// times). Under faults an operation whose outcome is unknown may or may not
// have happened; every rule here holds for both.
package history

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"rekey.io/rekey/pkg/issuance"
)

// Kind is what an operation asked for.
type Kind string

// Kinds of operations.
const (
	KindCreate         Kind = "Create"
	KindApprove        Kind = "Approve"
	KindDeny           Kind = "Deny"
	KindNodeClient     Kind = "NodeClient"
	KindRotateStart    Kind = "RotateStart"
	KindRotateComplete Kind = "RotateComplete"
	KindGet            Kind = "Get"
)

// Kinds lists every Kind in the order reports print them.
var Kinds = []Kind{KindCreate, KindApprove, KindDeny, KindNodeClient, KindRotateStart, KindRotateComplete, KindGet}

// Outcome is what the client knows of an operation's effect.
type Outcome string

// Outcomes.
const (
	// OK: acknowledged; the write happened (or the read answered).
	OK Outcome = "OK"
	// Failed: the server refused before applying anything.
	Failed Outcome = "Failed"
	// Unknown: no answer that says (timeout, 5xx, connection error); the
	// write may have happened, now or later.
	Unknown Outcome = "Unknown"
)

// Outcomes lists every Outcome in the order reports print them.
var Outcomes = []Outcome{OK, Failed, Unknown}

// Op is one operation: what was asked, and what the response carried.
type Op struct {
	ID      int
	Kind    Kind
	Replica int
	// Object is the CSR or CA name.
	Object string
	// UID is the CSR's UID when known.
	UID        string
	Start, End time.Time
	Outcome    Outcome
	Err        string
	// Reason is the API status reason of the error (NotFound, Conflict,
	// ...), empty when there was none or the error was not an API status.
	// Set by End. (Added to the design: a read that failed NotFound after
	// an acknowledged create is a stale read, a 429 is not.)
	Reason string
	// ResourceVersion is the resourceVersion of the object the response
	// carried.
	ResourceVersion string
	// What the response carried (KindCreate, Approve, Deny, NodeClient,
	// Get).
	Approved, Denied, Failed bool
	// Certificate is status.certificate as the response carried it (PEM,
	// leaf first); nil if none.
	Certificate []byte
	// AfterWrite is, for a KindGet, the ID of the acknowledged write this
	// read follows (0: none).
	AfterWrite int
}

// History is the record of every operation, safe for concurrent use.
//
// Begin hands the caller its own Op to fill while the call runs; End
// stores a copy. The caller must not touch the Op from another goroutine
// meanwhile, and the History never reads it before End, so no lock is
// needed around the filling.
type History struct {
	mu     sync.Mutex
	nextID int
	// pending holds what Begin knew of each op not yet ended.
	pending map[int]Op
	done    []Op
	now     func() time.Time
}

// New returns an empty History.
func New() *History {
	return &History{pending: map[int]Op{}, now: time.Now}
}

// Begin records the start of an operation and returns it with its ID and
// Start set.
func (h *History) Begin(kind Kind, replica int, object string) *Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.init()
	h.nextID++
	op := Op{ID: h.nextID, Kind: kind, Replica: replica, Object: object, Start: h.now()}
	h.pending[op.ID] = op
	return &op
}

// End records the end of an operation: End is now, Outcome is classified
// from err (nil: OK), Err and Reason describe err. A second End of the same
// op is ignored.
func (h *History) End(op *Op, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.init()
	if _, ok := h.pending[op.ID]; !ok {
		return
	}
	op.End = h.now()
	op.Outcome = Classify(err)
	op.Err, op.Reason = "", ""
	if err != nil {
		op.Err = err.Error()
		op.Reason = string(apierrors.ReasonForError(err))
	}
	delete(h.pending, op.ID)
	h.done = append(h.done, *op)
}

// init makes the zero History usable.
func (h *History) init() {
	if h.pending == nil {
		h.pending = map[int]Op{}
	}
	if h.now == nil {
		h.now = time.Now
	}
}

// Ops returns every operation by ID. An operation that has begun and not
// ended is returned as Begin knew it, with Outcome Unknown: its call may
// still take effect.
func (h *History) Ops() []Op {
	h.mu.Lock()
	ops := make([]Op, 0, len(h.done)+len(h.pending))
	ops = append(ops, h.done...)
	for _, op := range h.pending {
		op.Outcome, op.Err = Unknown, "not ended when the history was read"
		ops = append(ops, op)
	}
	h.mu.Unlock()
	sort.Slice(ops, func(i, j int) bool { return ops[i].ID < ops[j].ID })
	return ops
}

// Classify says what an error tells of a write's effect. nil is OK. An API
// status that the server sends before applying anything is Failed:
// Conflict, Invalid, Forbidden, NotFound, AlreadyExists, BadRequest,
// MethodNotSupported, Unauthorized, and TooManyRequests (the rate limit
// and max-in-flight refuse a request before it runs). Everything else is
// Unknown: timeouts (the client's, 408 and 504), 5xx, connection errors,
// EOF, a cancelled context: the write may have been applied, or may be
// applied later by a replica that was paused holding it.
func Classify(err error) Outcome {
	if err == nil {
		return OK
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return Unknown
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return Unknown
	}
	switch {
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsInternalError(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsUnexpectedServerError(err):
		return Unknown
	case apierrors.IsConflict(err), apierrors.IsInvalid(err), apierrors.IsForbidden(err),
		apierrors.IsNotFound(err), apierrors.IsAlreadyExists(err), apierrors.IsBadRequest(err),
		apierrors.IsMethodNotSupported(err), apierrors.IsUnauthorized(err), apierrors.IsTooManyRequests(err):
		return Failed
	}
	return Unknown
}

// CAObservation is one look at a CA: from the load's observer on any
// replica, or the final state.
type CAObservation struct {
	Time            time.Time
	Name            string
	ResourceVersion string
	Phase           string
	// Current, Next, Previous are status.current, .next, .previous (nil
	// when absent).
	Current, Next, Previous *x509.Certificate
	// LastCompletionTime is status.lastCompletionTime.
	LastCompletionTime time.Time
	// CurrentKeyID, NextKeyID, PreviousKeyID are the key-store IDs of
	// status.current, .next, .previous (.keyID): what issuance records
	// name as CAKeyID. Optional (added to the design): without them the
	// checker learns the mapping from records whose certificate it saw.
	CurrentKeyID, NextKeyID, PreviousKeyID string
}

// Final is the state at the end of the run, after the cluster settled.
type Final struct {
	// CSRs is every request at the end.
	CSRs []FinalCSR
	// Records is every issuance record at the end.
	Records []issuance.Record
	// RecordsEverWritten is every issuance record the driver saw put in
	// etcd over the run (a watch on the records prefix, from before the
	// load's first write to the snapshot), including those a Complete
	// later pruned and those the cleaner dropped. A record put twice may
	// be listed twice; one also in Records may be listed in both.
	RecordsEverWritten []issuance.Record
	// RecordsComplete is true when the watch behind RecordsEverWritten
	// saw every event: it began before the load's first write and had no
	// compaction gap and no missed revision. Only then is a certificate
	// without a record a violation whatever its key; otherwise the record
	// of a retired key's or an expired certificate may have been deleted
	// unseen, and the checker lets it pass (and the report says so).
	RecordsComplete bool
	// CAs is each CA at the end.
	CAs []CAObservation
	// CAKeys is every CA certificate ever observed, by CA name.
	CAKeys map[string][]*x509.Certificate
}

// FinalCSR is one request at the end.
type FinalCSR struct {
	Name, UID, SignerName    string
	Approved, Denied, Failed bool
	Certificate              []byte
}

// Report is what Check found.
type Report struct {
	Violations []Violation
	OpsByKind  map[Kind]map[Outcome]int
	// UnpublishedSignatures counts records whose certificate no client
	// ever saw and the request does not hold: a signature whose publishing
	// write lost (records are written before it), not a violation (unless
	// a request has more than its writes account for:
	// InvSignedOncePerWrite).
	UnpublishedSignatures int
	// RecordsComplete is Final.RecordsComplete: whether every record
	// written over the run was seen, so that every certificate was
	// required to have one.
	RecordsComplete bool
	// RecordsUnchecked counts the certificates seen without a record that
	// were let pass because the record history was incomplete (their key
	// was retired, or they had expired, so their record may have been
	// deleted unseen). Always 0 when RecordsComplete.
	RecordsUnchecked int
}

// Violation is one broken invariant.
type Violation struct{ Invariant, Detail string }

// The invariants, as violations name them.
const (
	InvAcknowledgedApproval = "acknowledged-approval-has-one-certificate"
	InvOneCertificate       = "one-certificate-per-request"
	InvSerialUnique         = "serial-unique-per-ca-key"
	InvRetiredKey           = "no-signature-by-retired-key"
	InvDenied               = "no-certificate-when-denied"
	InvRecords              = "records-match-certificates"
	InvCAPhase              = "ca-phase-consistent"
	InvLinearizableRead     = "linearizable-read"
	// InvSignedOncePerWrite: a request has at most one issuance record
	// more than the writes on it whose outcome was not acknowledged. Each
	// write signs at most once (a conflict retry inside the server reuses
	// its certificate), one that is acknowledged publishes what it
	// signed, and the leader's signer controller signs only a stored
	// approval without a certificate: so beyond the one published
	// signature, each extra record needs a write that failed or whose
	// outcome is unknown. More is a request signed twice.
	InvSignedOncePerWrite = "signed-at-most-once-per-write"
	// InvUnparseable: the server returned a status.certificate whose leaf
	// does not parse.
	InvUnparseable = "unparseable-certificate"
)

// Invariants lists every invariant name in the order Check reports them.
var Invariants = []string{InvUnparseable, InvAcknowledgedApproval, InvOneCertificate, InvSerialUnique, InvRetiredKey,
	InvDenied, InvRecords, InvSignedOncePerWrite, InvCAPhase, InvLinearizableRead}
