package revocation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// MaxRequestBytes is the largest SubjectAccessReview the webhook reads
// into a pooled buffer (its fast path). kube-apiserver's reviews are a few
// hundred bytes to a few kilobytes (the user's groups and extra, the
// request's attributes).
const MaxRequestBytes = 64 << 10

// MaxReviewBytes bounds any review. A larger one than MaxRequestBytes is a
// list or watch whose client made its label or field selector long:
// kube-apiserver copies every requirement into the review. kube-apiserver
// takes at most 1 MiB of request headers (the URL, selectors included),
// which the review's JSON grows about sixfold at worst: 8 MiB is above
// anything kube-apiserver sends. The client of a revoked certificate must
// not escape the check by making the review large: an HTTP error makes
// kube-apiserver apply its failurePolicy (NoOpinion: RBAC decides), so a
// larger review is answered Deny, not 413.
const MaxReviewBytes = 8 << 20

// largeSlots is how many reviews over MaxRequestBytes are read at once:
// memory for them stays bounded (each buffer up to MaxReviewBytes, twice
// that while a body of unknown length grows) whoever sends them.
const largeSlots = 4

// largeWait bounds how long a large review waits for a slot: below
// kube-apiserver's webhook timeout (3s in docs/revocation.md), so that the
// answer (Deny: it could not be checked) reaches it rather than a timeout
// (failurePolicy).
const largeWait = 2 * time.Second

// ReadTimeout bounds how long the webhook reads a review's body (a client
// that trickles it, or never sends it, holds a goroutine and a buffer),
// and WriteTimeout how long it writes the answer. The webhook is served
// outside the generic chain's request timeout, to anyone; kube-apiserver
// sends a review in one write and reads the answer at once.
const (
	ReadTimeout  = 5 * time.Second
	WriteTimeout = 10 * time.Second
)

// writeTimeout is WriteTimeout, shortened by tests.
var writeTimeout = WriteTimeout

// Path is where rekey serves the webhook, without authentication.
const Path = "/revocation/authorize"

const reviewAPIVersion, reviewKind = "authorization.k8s.io/v1", "SubjectAccessReview"

// review is the part of a SubjectAccessReview v1 the webhook reads: other
// fields (the user's groups, the attributes) are skipped by the decoder
// without being stored. extra is a map, not a struct field named after
// the credential-id key: encoding/json matches struct fields
// case-insensitively with Unicode folding, the last match winning, so a
// look-alike key sorted after the real one would replace it; the webhook
// must read exactly the key kube-apiserver's matchConditions read.
type review struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Extra map[string][]string `json:"extra"`
	} `json:"spec"`
}

// noOpinion is the whole answer for a certificate that is not revoked (or a
// request without one): allowed false without denied lets kube-apiserver's
// next authorizer decide.
var noOpinion = []byte(`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","status":{"allowed":false}}` + "\n")

// jsonContentType is the answers' Content-Type, shared rather than made by
// Header.Set for each answer (nothing downstream changes it).
var jsonContentType = []string{"application/json"}

// Webhook answers kube-apiserver's SubjectAccessReviews from set: Deny
// when the request's credential-id is a revoked certificate, NoOpinion
// otherwise, never Allow. Before set has synced it answers 503 with
// Retry-After (kube-apiserver's client retries within the webhook's
// timeout, then applies the failurePolicy).
type Webhook struct {
	set *Set
}

// NewWebhook returns the webhook over set, and registers its metrics.
func NewWebhook(set *Set) *Webhook {
	RegisterMetrics()
	return &Webhook{set: set}
}

// bufs hold request bodies: reading into a pooled buffer keeps the only
// per-request allocations those of the JSON decoder.
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func (h *Webhook) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	defer func() { duration.Observe(time.Since(start).Seconds()) }()

	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.fail(w, http.StatusMethodNotAllowed, "the revocation webhook takes POST of a SubjectAccessReview (authorization.k8s.io/v1)")
		return
	}
	// Not supported by every ResponseWriter (a test recorder): then the
	// server's own timeouts are all there is. HTTP/2 deadlines are the
	// stream's; HTTP/1's are the connection's, and net/http takes the
	// write deadline off after the answer is flushed (the read deadline
	// when it reads the next request), so neither outlives this request.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(start.Add(ReadTimeout))
	_ = rc.SetWriteDeadline(start.Add(writeTimeout))
	if req.ContentLength > MaxReviewBytes {
		h.deny(w, tooLarge)
		return
	}
	bp := bufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= MaxRequestBytes+1 {
			*bp = (*bp)[:0]
			bufs.Put(bp)
		}
	}()
	var body []byte
	var err error
	if req.ContentLength <= MaxRequestBytes {
		body, err = readAtMost(req.Body, (*bp)[:0], MaxRequestBytes)
		*bp = body
	}
	if req.ContentLength > MaxRequestBytes || errors.Is(err, errTooLarge) {
		release, ok := acquireLarge(req.Context(), start.Add(largeWait))
		if !ok {
			h.deny(w, tooBusy)
			return
		}
		defer release()
		body, err = readLarge(req.Body, body, req.ContentLength)
		if errors.Is(err, errTooLarge) {
			h.deny(w, tooLarge)
			return
		}
	}
	if err != nil {
		h.fail(w, http.StatusBadRequest, "reading the SubjectAccessReview: "+err.Error())
		return
	}
	var r review
	if err := decode(body, &r); err != nil {
		h.fail(w, http.StatusBadRequest, err.Error())
		return
	}
	if !h.set.HasSynced() {
		w.Header().Set("Retry-After", "1")
		h.fail(w, http.StatusServiceUnavailable, "the revocations are not loaded yet")
		return
	}
	for _, id := range r.Spec.Extra[CredentialIDKey] {
		e, ok := h.set.LookupCredentialID(id)
		if !ok {
			continue
		}
		denyCount.Inc()
		out := appendDeny((*bp)[:0], &e)
		*bp = out
		w.Header()["Content-Type"] = jsonContentType
		_, _ = w.Write(out)
		return
	}
	noOpinionCount.Inc()
	w.Header()["Content-Type"] = jsonContentType
	_, _ = w.Write(noOpinion)
}

// Reasons of the Deny given for a review the webhook could not check: an
// HTTP error would make kube-apiserver apply its failurePolicy, which may
// let the request through.
var (
	tooLarge = "rekey: the SubjectAccessReview is larger than " + strconv.Itoa(MaxReviewBytes) + " bytes; a request that cannot be checked is refused"
	tooBusy  = "rekey: too many large SubjectAccessReviews at once; a request that cannot be checked is refused"
)

// deny answers Deny with reason.
func (h *Webhook) deny(w http.ResponseWriter, reason string) {
	denyCount.Inc()
	klog.Background().V(2).Info("Revocation webhook refused a review it could not check", "reason", reason)
	b := []byte(`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","status":{"allowed":false,"denied":true,"reason":`)
	b = appendJSONString(b, []byte(reason))
	b = append(b, "}}\n"...)
	w.Header()["Content-Type"] = jsonContentType
	_, _ = w.Write(b)
}

// large admits largeSlots large reviews at once.
var large = make(chan struct{}, largeSlots)

// acquireLarge waits for a slot for a large review until deadline or the
// request's end.
func acquireLarge(ctx context.Context, deadline time.Time) (release func(), ok bool) {
	release = func() { <-large }
	select {
	case large <- struct{}{}:
		return release, true
	default:
	}
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case large <- struct{}{}:
		return release, true
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, false
}

// readLarge reads the rest of a large review after head (what was read
// already), into a buffer of its own: of the announced length when known,
// grown up to MaxReviewBytes otherwise.
func readLarge(r io.Reader, head []byte, contentLength int64) ([]byte, error) {
	size := len(head) + 64<<10
	if contentLength > 0 {
		size = int(contentLength) + 1 // +1: reads EOF without growing
	}
	buf := make([]byte, len(head), size)
	copy(buf, head)
	return readAtMost(r, buf, MaxReviewBytes)
}

// decode reads a SubjectAccessReview v1 into r.
func decode(body []byte, r *review) error {
	if err := json.Unmarshal(body, r); err != nil {
		return fmt.Errorf("the body is not a SubjectAccessReview in JSON: %w", err)
	}
	if r.APIVersion != reviewAPIVersion || r.Kind != reviewKind {
		return fmt.Errorf("apiVersion %q, kind %q: the webhook takes apiVersion %s, kind %s (set subjectAccessReviewVersion: v1)", r.APIVersion, r.Kind, reviewAPIVersion, reviewKind)
	}
	return nil
}

func (h *Webhook) fail(w http.ResponseWriter, code int, msg string) {
	errorCount.Inc()
	if code != http.StatusServiceUnavailable {
		klog.Background().V(2).Info("Revocation webhook refused a request", "code", code, "reason", msg)
	}
	http.Error(w, "rekey revocation webhook: "+msg, code)
}

var errTooLarge = errors.New("request body too large")

// readAtMost reads r to its end into buf, failing with errTooLarge past
// limit bytes.
func readAtMost(r io.Reader, buf []byte, limit int) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			if len(buf) > limit {
				return buf, errTooLarge
			}
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return buf, errTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// DenyReason is the reason the webhook gives for a revoked certificate;
// it ends up in kube-apiserver's 403 message, where rekey-agent looks for
// "X509SHA256=<hex> was revoked".
func DenyReason(e *Entry) string {
	return string(appendReason(nil, e))
}

func appendReason(b []byte, e *Entry) []byte {
	b = append(b, "rekey: certificate "...)
	b = append(b, CredentialIDPrefix...)
	b = appendHex(b, e.SHA256)
	b = append(b, " was revoked ("...)
	b = append(b, e.Reason...)
	b = append(b, ')')
	if !e.RevocationTime.IsZero() {
		b = append(b, " at "...)
		b = e.RevocationTime.UTC().AppendFormat(b, time.RFC3339)
	}
	return b
}

func appendHex(b []byte, sum [32]byte) []byte {
	const digits = "0123456789abcdef"
	for _, c := range sum {
		b = append(b, digits[c>>4], digits[c&0xf])
	}
	return b
}

// appendDeny writes the whole Deny answer.
func appendDeny(b []byte, e *Entry) []byte {
	b = append(b, `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","status":{"allowed":false,"denied":true,"reason":`...)
	b = appendJSONString(b, appendReason(nil, e))
	return append(b, "}}\n"...)
}

// appendJSONString quotes s as a JSON string. The reason is ASCII from
// validated fields, but the reason enum comes from an API object: escape
// anyway rather than trust it.
func appendJSONString(b, s []byte) []byte {
	const digits = "0123456789abcdef"
	b = append(b, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', digits[c>>4], digits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
