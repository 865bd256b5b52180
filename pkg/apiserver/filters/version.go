package filters

import (
	"net/http"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// VersionHeader carries rekey-apiserver's version (its gitVersion, e.g.
// v0.1.0+1a2b3c4d5e6f) on the discovery responses of rekey's API groups.
// Behind the aggregation layer /version is kube-apiserver's, while
// /apis/<rekey group>/<version> is proxied to rekey with its response
// headers: `kubectl rekey version` reads rekey's version there.
const VersionHeader = "Rekey-Version"

// WithVersionHeader sets VersionHeader to gitVersion on GET responses for
// the group-version discovery documents of groups ending in ".rekey.io",
// asked by an authenticated user; other responses stay as they were. The
// version and commit tell an attacker which fixes a server lacks: a
// request without a user (a 401) or an anonymous one is not told. It must
// sit inside the chain, after authentication, to see the user.
func WithVersionHeader(handler http.Handler, gitVersion string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && isRekeyGroupVersionPath(req.URL.Path) && authenticated(req) {
			w.Header().Set(VersionHeader, gitVersion)
		}
		handler.ServeHTTP(w, req)
	})
}

// isRekeyGroupVersionPath reports whether path is /apis/<group>/<version>
// with a group of rekey's.
func isRekeyGroupVersionPath(path string) bool {
	rest, ok := strings.CutPrefix(path, "/apis/")
	if !ok {
		return false
	}
	group, version, ok := strings.Cut(strings.TrimSuffix(rest, "/"), "/")
	return ok && version != "" && !strings.Contains(version, "/") && strings.HasSuffix(group, ".rekey.io")
}

// authenticated reports whether the request's user was authenticated:
// the authentication filter adds system:authenticated to every user it
// authenticates, and the anonymous user (system:unauthenticated) is not.
func authenticated(req *http.Request) bool {
	u, ok := request.UserFrom(req.Context())
	if !ok || u.GetName() == user.Anonymous {
		return false
	}
	return slices.Contains(u.GetGroups(), user.AllAuthenticated)
}
