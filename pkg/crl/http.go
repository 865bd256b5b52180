package crl

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// PathPrefix is where the CRLs are served: /crl/<caName> (the current
// key's) and /crl/<caName>/<keyID>.
const PathPrefix = "/crl/"

// ContentType is the media type of a DER CRL (RFC 5280, 4.2.1.13 / RFC
// 2585).
const ContentType = "application/pkix-crl"

// MaxAge bounds how long an HTTP cache may keep a CRL (Cache-Control
// max-age): a CRL is re-issued at once when a certificate is revoked, and
// a cache in front of rekey should not hand out the one before for long.
// It is never past nextUpdate.
const MaxAge = time.Minute

// Handler serves the CRLs without authentication: what they hold is
// public, and relying parties fetch them anonymously. Only GET and HEAD;
// conditional requests (If-None-Match on the ETag, If-Modified-Since on
// thisUpdate) are answered 304.
func (m *Manager) Handler() http.Handler {
	return http.HandlerFunc(m.serveHTTP)
}

func (m *Manager) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "only GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	ca, keyID, ok := parsePath(r.URL.Path)
	if !ok {
		http.Error(w, "not found: the CRLs are at "+PathPrefix+"<caName> and "+PathPrefix+"<caName>/<keyID>", http.StatusNotFound)
		return
	}
	var crl *CRL
	var err error
	if keyID == "" {
		crl, err = m.Current(r.Context(), ca)
	} else {
		crl, err = m.Get(r.Context(), ca, keyID)
	}
	switch {
	case errors.Is(err, ErrNotFound):
		http.Error(w, fmt.Sprintf("no CRL: CertificateAuthority %q has no such key", ca), http.StatusNotFound)
		return
	case errors.Is(err, ErrNotReady):
		w.Header().Set("Retry-After", "1")
		http.Error(w, "the revocations are not loaded yet; retry", http.StatusServiceUnavailable)
		return
	case err != nil:
		// The cause (a key store's error) is for the operator's log,
		// not for anonymous clients.
		klog.FromContext(r.Context()).Error(err, "Issuing a CRL", "ca", ca, "keyID", keyID)
		w.Header().Set("Retry-After", "10")
		http.Error(w, "the CRL cannot be issued now; retry", http.StatusServiceUnavailable)
		return
	}
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("ETag", crl.ETag)
	h.Set("Cache-Control", fmt.Sprintf("public, max-age=%d", maxAge(crl.NextUpdate.Sub(m.clock.Now()))))
	h.Set("X-Content-Type-Options", "nosniff")
	http.ServeContent(w, r, "", crl.ThisUpdate, bytes.NewReader(crl.DER))
}

// maxAge is the Cache-Control max-age, in whole seconds, for a CRL that
// is valid for untilNext more.
func maxAge(untilNext time.Duration) int {
	return int(max(min(untilNext, MaxAge), 0) / time.Second)
}

// parsePath splits /crl/<caName>[/<keyID>]; an empty or extra segment is
// not a CRL's path.
func parsePath(p string) (ca, keyID string, ok bool) {
	rest, ok := strings.CutPrefix(p, PathPrefix)
	if !ok {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	switch {
	case len(parts) == 1 && parts[0] != "":
		return parts[0], "", true
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return parts[0], parts[1], true
	}
	return "", "", false
}
