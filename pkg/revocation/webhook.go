package revocation

import (
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

// MaxRequestBytes bounds a SubjectAccessReview's body. kube-apiserver's
// reviews are a few hundred bytes to a few kilobytes (the user's groups
// and extra); 64 KiB leaves room for large group lists and keeps what an
// unauthenticated client can make the webhook read small.
const MaxRequestBytes = 64 << 10

// Path is where rekey serves the webhook, without authentication.
const Path = "/revocation/authorize"

const reviewAPIVersion, reviewKind = "authorization.k8s.io/v1", "SubjectAccessReview"

// review is the part of a SubjectAccessReview v1 the webhook reads: other
// fields (the user's groups, the attributes, every other extra) are skipped
// by the decoder without being stored.
type review struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Extra struct {
			CredentialID []string `json:"authentication.kubernetes.io/credential-id"`
		} `json:"extra"`
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
	if req.ContentLength > MaxRequestBytes {
		h.fail(w, http.StatusRequestEntityTooLarge, "the SubjectAccessReview is larger than "+strconv.Itoa(MaxRequestBytes)+" bytes")
		return
	}
	bp := bufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= MaxRequestBytes+1 {
			*bp = (*bp)[:0]
			bufs.Put(bp)
		}
	}()
	body, err := readAtMost(req.Body, (*bp)[:0], MaxRequestBytes)
	*bp = body
	if errors.Is(err, errTooLarge) {
		h.fail(w, http.StatusRequestEntityTooLarge, "the SubjectAccessReview is larger than "+strconv.Itoa(MaxRequestBytes)+" bytes")
		return
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
	for _, id := range r.Spec.Extra.CredentialID {
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
