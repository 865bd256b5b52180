package standalone

import (
	"slices"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"
)

// rulesFor lists what the standalone policy (authorize) allows u, for
// SelfSubjectRulesReview (`kubectl auth can-i --list`). authorize is the
// decision; TestRulesMatchTheAuthorizer keeps the two equal.
func rulesFor(u user.Info) ([]authorizationv1.ResourceRule, []authorizationv1.NonResourceRule) {
	groups := u.GetGroups()
	if slices.Contains(groups, user.SystemPrivilegedGroup) {
		return []authorizationv1.ResourceRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}},
			[]authorizationv1.NonResourceRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}}
	}
	health := authorizationv1.NonResourceRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz", "/healthz/*", "/livez", "/livez/*", "/readyz", "/readyz/*"}}
	if !slices.Contains(groups, user.AllAuthenticated) {
		return nil, []authorizationv1.NonResourceRule{health}
	}
	nonResource := []authorizationv1.NonResourceRule{health,
		{Verbs: []string{"get"}, NonResourceURLs: []string{"/version", "/api", "/api/*", "/apis", "/apis/*", "/openapi/*"}}}
	resource := []authorizationv1.ResourceRule{
		{Verbs: slices.Clone(requesterVerbs), APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"certificatesigningrequests"}},
		{Verbs: []string{"create"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"selfsubjectreviews"}},
		{Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectaccessreviews", "selfsubjectrulesreviews"}},
	}
	if slices.Contains(groups, "system:nodes") {
		resource = append(resource,
			authorizationv1.ResourceRule{Verbs: []string{"create"}, APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"certificatesigningrequests/selfnodeclient"}},
			authorizationv1.ResourceRule{Verbs: []string{"get"}, APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"signers"}},
			authorizationv1.ResourceRule{Verbs: []string{"get", "watch"}, APIGroups: []string{"rotation.rekey.io"}, Resources: []string{"certificateauthorities"}})
	}
	if slices.Contains(groups, "system:bootstrappers") {
		resource = append(resource,
			authorizationv1.ResourceRule{Verbs: []string{"create"}, APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"certificatesigningrequests/nodeclient"}})
	}
	return resource, nonResource
}
