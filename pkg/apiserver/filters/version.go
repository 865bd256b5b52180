package filters

import (
	"net/http"
	"strings"
)

// VersionHeader carries rekey-apiserver's version (its gitVersion, e.g.
// v0.1.0+1a2b3c4d5e6f) on the discovery responses of rekey's API groups.
// Behind the aggregation layer /version is kube-apiserver's, while
// /apis/<rekey group>/<version> is proxied to rekey with its response
// headers: `kubectl rekey version` reads rekey's version there.
const VersionHeader = "Rekey-Version"

// WithVersionHeader sets VersionHeader to gitVersion on GET responses for
// the group-version discovery documents of groups ending in ".rekey.io";
// other responses stay as they were.
func WithVersionHeader(handler http.Handler, gitVersion string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && isRekeyGroupVersionPath(req.URL.Path) {
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
