package standalone

import (
	"context"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// NewAuthorizer returns the fixed policy of a standalone server, which has no RBAC
// to delegate to:
//   - members of system:masters may do anything;
//   - any other authenticated user may read discovery, OpenAPI and health
//     endpoints, and create, get, list and watch CertificateSigningRequests
//     (the requester role), and ask who they are and what they may do
//     (SelfSubjectReview, SelfSubjectAccessReview); approving and signing
//     need system:masters;
//   - system:nodes may have their own node client certificates auto-approved
//     (selfnodeclient), system:bootstrappers any node's (nodeclient);
//   - system:nodes may get Signers and get and watch CertificateAuthorities
//     (rekey-agent renews at once when its CA rotates);
//   - anonymous users may only read health endpoints.
func NewAuthorizer() authorizer.Authorizer {
	return standaloneAuthorizer{authorizer.AuthorizerFunc(authorize)}
}

// standaloneAuthorizer is the policy as a type, so that the
// SelfSubjectRulesReview handler knows rulesFor describes it.
type standaloneAuthorizer struct{ authorizer.AuthorizerFunc }

var requesterVerbs = []string{"create", "get", "list", "watch"}

func authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	u := a.GetUser()
	if u == nil {
		return authorizer.DecisionDeny, "no user", nil
	}
	groups := u.GetGroups()
	if slices.Contains(groups, user.SystemPrivilegedGroup) {
		return authorizer.DecisionAllow, "", nil
	}
	if !a.IsResourceRequest() {
		if a.GetVerb() == "get" && publicPath(a.GetPath(), slices.Contains(groups, user.AllAuthenticated)) {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "standalone mode: only system:masters may use this path", nil
	}
	if !slices.Contains(groups, user.AllAuthenticated) {
		return authorizer.DecisionNoOpinion, "standalone mode: anonymous requests are not allowed", nil
	}
	if a.GetAPIGroup() == "certificates.rekey.io" && a.GetResource() == "certificatesigningrequests" &&
		a.GetSubresource() == "" && slices.Contains(requesterVerbs, a.GetVerb()) {
		return authorizer.DecisionAllow, "", nil
	}
	// Asking who one is and what one may do (kubectl auth whoami, kubectl
	// auth can-i [--list]), as kube-apiserver's system:basic-user role
	// allows.
	if a.GetVerb() == "create" && a.GetSubresource() == "" &&
		(a.GetAPIGroup() == "authentication.k8s.io" && a.GetResource() == "selfsubjectreviews" ||
			a.GetAPIGroup() == "authorization.k8s.io" && (a.GetResource() == "selfsubjectaccessreviews" || a.GetResource() == "selfsubjectrulesreviews")) {
		return authorizer.DecisionAllow, "", nil
	}
	// Node client auto-approval, as artifacts/rbac/node-client.yaml grants
	// it in a cluster: nodes renew their own, bootstrappers get any node's.
	if a.GetAPIGroup() == "certificates.rekey.io" && a.GetResource() == "certificatesigningrequests" && a.GetVerb() == "create" {
		if a.GetSubresource() == "selfnodeclient" && slices.Contains(groups, "system:nodes") {
			return authorizer.DecisionAllow, "", nil
		}
		if a.GetSubresource() == "nodeclient" && slices.Contains(groups, "system:bootstrappers") {
			return authorizer.DecisionAllow, "", nil
		}
	}
	if slices.Contains(groups, "system:nodes") && a.GetSubresource() == "" &&
		(a.GetVerb() == "get" && a.GetAPIGroup() == "certificates.rekey.io" && a.GetResource() == "signers" ||
			(a.GetVerb() == "get" || a.GetVerb() == "watch") && a.GetAPIGroup() == "rotation.rekey.io" && a.GetResource() == "certificateauthorities") {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "standalone mode: only system:masters may do this; other users may create, get, list and watch certificatesigningrequests", nil
}

func publicPath(path string, authenticated bool) bool {
	switch path {
	case "/healthz", "/livez", "/readyz":
		return true
	}
	if strings.HasPrefix(path, "/healthz/") || strings.HasPrefix(path, "/livez/") || strings.HasPrefix(path, "/readyz/") {
		return true
	}
	if !authenticated {
		return false
	}
	return path == "/version" || path == "/api" || path == "/apis" ||
		strings.HasPrefix(path, "/api/") || strings.HasPrefix(path, "/apis/") ||
		strings.HasPrefix(path, "/openapi/")
}
