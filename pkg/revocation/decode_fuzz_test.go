package revocation

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
)

// FuzzDecode feeds arbitrary bodies to the webhook, which any client can
// reach without credentials. Whatever the body: no panic, only 200, 400 or
// 413; a 200 is a SubjectAccessReview that never allows, and denies only
// when the body names the one revoked certificate. The seed corpus is in
// testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	revoked := sum("revoked")
	set := NewSet()
	set.entries[revoked] = pack(&Entry{SHA256: revoked, Reason: certv1alpha1.RevocationReasonKeyCompromise, RevocationTime: revokedAt})
	synced := func() bool { return true }
	set.synced.Store(&synced)
	h := NewWebhook(set)
	f.Add(sar(map[string]authorizationv1.ExtraValue{CredentialIDKey: {"X509SHA256=" + Hex(revoked)}}))
	f.Add(sar(map[string]authorizationv1.ExtraValue{CredentialIDKey: {"X509SHA256=" + Hex(sum("other"))}}))
	f.Add(sar(nil))
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body)))
		switch rec.Code {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			return
		case http.StatusOK:
		default:
			t.Fatalf("code %d: %s", rec.Code, rec.Body)
		}
		var out authorizationv1.SubjectAccessReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("answer %q is not JSON: %v", rec.Body, err)
		}
		if out.Status.Allowed {
			t.Fatalf("allowed: %s", rec.Body)
		}
		if out.Status.Denied {
			var in review
			if err := json.Unmarshal(body, &in); err != nil {
				t.Fatalf("denied a body that does not decode: %v", err)
			}
			named := false
			for _, id := range in.Spec.Extra[CredentialIDKey] {
				if s, ok := ParseCredentialID(id); ok && s == revoked {
					named = true
				}
			}
			if !named {
				t.Fatalf("denied a body that names no revoked certificate: %q", body)
			}
		}
	})
}
