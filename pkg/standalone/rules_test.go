package standalone

import (
	"context"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// TestRulesMatchTheAuthorizer: what kubectl auth can-i --list shows is what
// the authorizer decides, over a grid of verbs, resources and paths.
func TestRulesMatchTheAuthorizer(t *testing.T) {
	users := []user.Info{
		&user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}},
		&user.DefaultInfo{Name: "bob", Groups: []string{"dev", user.AllAuthenticated}},
		&user.DefaultInfo{Name: "system:node:n1", Groups: []string{"system:nodes", user.AllAuthenticated}},
		&user.DefaultInfo{Name: "bootstrap", Groups: []string{"system:bootstrappers", user.AllAuthenticated}},
		&user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}},
	}
	verbs := []string{"get", "list", "watch", "create", "update", "patch", "delete", "approve", "sign", "revoke"}
	resources := [][2]string{
		{"certificates.rekey.io", "certificatesigningrequests"}, {"certificates.rekey.io", "certificatesigningrequests/approval"},
		{"certificates.rekey.io", "certificatesigningrequests/selfnodeclient"}, {"certificates.rekey.io", "certificatesigningrequests/nodeclient"},
		{"certificates.rekey.io", "signers"}, {"rotation.rekey.io", "certificateauthorities"}, {"rotation.rekey.io", "certificateauthorities/rotate"},
		{"authentication.k8s.io", "selfsubjectreviews"}, {"authorization.k8s.io", "selfsubjectaccessreviews"},
		{"authorization.k8s.io", "selfsubjectrulesreviews"}, {"authorization.k8s.io", "subjectaccessreviews"}, {"", "secrets"},
	}
	paths := []string{"/healthz", "/healthz/etcd", "/livez", "/readyz/ping", "/version", "/api", "/api/v1", "/apis", "/apis/certificates.rekey.io/v1alpha1", "/openapi/v3", "/metrics", "/debug/pprof/"}
	for _, u := range users {
		resourceRules, nonResourceRules := rulesFor(u)
		for _, verb := range verbs {
			for _, r := range resources {
				resource, sub, _ := strings.Cut(r[1], "/")
				a := authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: r[0], Resource: resource, Subresource: sub, ResourceRequest: true}
				d, _, _ := authorize(context.Background(), a)
				if allowed, listed := d == authorizer.DecisionAllow, coversResource(resourceRules, verb, r[0], r[1]); allowed != listed {
					t.Errorf("%s %s %s/%s: authorizer allows %v, rules list %v", u.GetName(), verb, r[0], r[1], allowed, listed)
				}
			}
			for _, p := range paths {
				d, _, _ := authorize(context.Background(), authorizer.AttributesRecord{User: u, Verb: verb, Path: p})
				if allowed, listed := d == authorizer.DecisionAllow, coversPath(nonResourceRules, verb, p); allowed != listed {
					t.Errorf("%s %s %s: authorizer allows %v, rules list %v", u.GetName(), verb, p, allowed, listed)
				}
			}
		}
	}
}

func matches(list []string, v string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, v)
}

func coversResource(rules []authorizationv1.ResourceRule, verb, group, resource string) bool {
	for _, r := range rules {
		if matches(r.Verbs, verb) && matches(r.APIGroups, group) && matches(r.Resources, resource) {
			return true
		}
	}
	return false
}

func coversPath(rules []authorizationv1.NonResourceRule, verb, path string) bool {
	for _, r := range rules {
		if !matches(r.Verbs, verb) {
			continue
		}
		for _, u := range r.NonResourceURLs {
			if u == "*" || u == path || strings.HasSuffix(u, "*") && strings.HasPrefix(path, strings.TrimSuffix(u, "*")) {
				return true
			}
		}
	}
	return false
}
