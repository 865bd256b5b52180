package filters

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWithVersionHeader(t *testing.T) {
	h := WithVersionHeader(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}), "v0.1.0+abc")
	for path, want := range map[string]string{
		"/apis/certificates.rekey.io/v1alpha1":                            "v0.1.0+abc",
		"/apis/rotation.rekey.io/v1alpha1/":                               "v0.1.0+abc",
		"/apis/certificates.rekey.io/v1alpha1/certificatesigningrequests": "",
		"/apis/certificates.rekey.io":                                     "",
		"/apis/apps/v1":                                                   "",
		"/version":                                                        "",
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if got := rec.Header().Get(VersionHeader); got != want {
			t.Errorf("%s: %s = %q, want %q", path, VersionHeader, got, want)
		}
	}
}
