package filters

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
)

func TestWithVersionHeader(t *testing.T) {
	h := WithVersionHeader(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}), "v0.1.0+abc")
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}
	anonymous := &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}
	for name, tc := range map[string]struct {
		path string
		user user.Info
		want string
	}{
		"group-version discovery": {path: "/apis/certificates.rekey.io/v1alpha1", user: alice, want: "v0.1.0+abc"},
		"with a trailing slash":   {path: "/apis/rotation.rekey.io/v1alpha1/", user: alice, want: "v0.1.0+abc"},
		"a resource":              {path: "/apis/certificates.rekey.io/v1alpha1/certificatesigningrequests", user: alice},
		"the group":               {path: "/apis/certificates.rekey.io", user: alice},
		"another group":           {path: "/apis/apps/v1", user: alice},
		"/version":                {path: "/version", user: alice},
		// The version and commit are for authenticated users: an
		// unauthenticated request (a 401, or anonymous) learns nothing.
		"no user: not authenticated":               {path: "/apis/certificates.rekey.io/v1alpha1"},
		"anonymous":                                {path: "/apis/certificates.rekey.io/v1alpha1", user: anonymous},
		"anonymous without system:unauthenticated": {path: "/apis/certificates.rekey.io/v1alpha1", user: &user.DefaultInfo{Name: user.Anonymous}},
		"a user without system:authenticated":      {path: "/apis/certificates.rekey.io/v1alpha1", user: &user.DefaultInfo{Name: "bob"}},
	} {
		t.Run(name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			if tc.user != nil {
				req = req.WithContext(request.WithUser(req.Context(), tc.user))
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if got := rec.Header().Get(VersionHeader); got != tc.want {
				t.Errorf("%s = %q, want %q", VersionHeader, got, tc.want)
			}
		})
	}
}
