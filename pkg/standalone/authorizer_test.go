package standalone

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

func TestStandaloneAuthorizer(t *testing.T) {
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters", "system:authenticated"}}
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{"system:authenticated"}}
	node := &user.DefaultInfo{Name: "system:node:n1", Groups: []string{"system:nodes", "system:authenticated"}}
	anon := &user.DefaultInfo{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}}
	res := func(u user.Info, verb, resource, sub string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: "certificates.rekey.io", Resource: resource, Subresource: sub, ResourceRequest: true}
	}
	path := func(u user.Info, p string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: "get", Path: p}
	}
	tests := map[string]struct {
		a     authorizer.AttributesRecord
		allow bool
	}{
		"admin approves":             {res(admin, "approve", "signers", ""), true},
		"user asks who they are":     {authorizer.AttributesRecord{User: bob, Verb: "create", APIGroup: "authentication.k8s.io", Resource: "selfsubjectreviews", ResourceRequest: true}, true},
		"user asks what they may":    {authorizer.AttributesRecord{User: bob, Verb: "create", APIGroup: "authorization.k8s.io", Resource: "selfsubjectaccessreviews", ResourceRequest: true}, true},
		"user cannot ask for others": {authorizer.AttributesRecord{User: bob, Verb: "create", APIGroup: "authorization.k8s.io", Resource: "subjectaccessreviews", ResourceRequest: true}, false},
		"anonymous cannot ask":       {authorizer.AttributesRecord{User: anon, Verb: "create", APIGroup: "authentication.k8s.io", Resource: "selfsubjectreviews", ResourceRequest: true}, false},
		"admin deletes":              {res(admin, "delete", "certificatesigningrequests", ""), true},
		"user creates a request":     {res(bob, "create", "certificatesigningrequests", ""), true},
		"user watches requests":      {res(bob, "watch", "certificatesigningrequests", ""), true},
		"user cannot approve":        {res(bob, "update", "certificatesigningrequests", "approval"), false},
		"user cannot sign":           {res(bob, "sign", "signers", ""), false},
		"user cannot delete":         {res(bob, "delete", "certificatesigningrequests", ""), false},
		"user cannot edit signers":   {res(bob, "create", "signers", ""), false},
		"node selfnodeclient":        {res(node, "create", "certificatesigningrequests", "selfnodeclient"), true},
		"node reads a Signer":        {res(node, "get", "signers", ""), true},
		"node cannot approve":        {res(node, "approve", "signers", ""), false},
		"node cannot list signers":   {res(node, "list", "signers", ""), false},
		"user cannot read signers":   {res(bob, "get", "signers", ""), false},
		"node reads a CA":            {authorizer.AttributesRecord{User: node, Verb: "get", APIGroup: "rotation.rekey.io", Resource: "certificateauthorities", ResourceRequest: true}, true},
		"node watches a CA":          {authorizer.AttributesRecord{User: node, Verb: "watch", APIGroup: "rotation.rekey.io", Resource: "certificateauthorities", ResourceRequest: true}, true},
		"node cannot rotate a CA":    {authorizer.AttributesRecord{User: node, Verb: "create", APIGroup: "rotation.rekey.io", Resource: "certificateauthorities", Subresource: "rotate", ResourceRequest: true}, false},
		"node nodeclient":            {res(node, "create", "certificatesigningrequests", "nodeclient"), false},
		"user selfnodeclient":        {res(bob, "create", "certificatesigningrequests", "selfnodeclient"), false},
		"user discovery":             {path(bob, "/apis/certificates.rekey.io/v1alpha1"), true},
		"user debug":                 {path(bob, "/debug/pprof/"), false},
		"anonymous health":           {path(anon, "/readyz"), true},
		"anonymous discovery":        {path(anon, "/apis"), false},
		"anonymous create":           {res(anon, "create", "certificatesigningrequests", ""), false},
	}
	authz := NewAuthorizer()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, _, err := authz.Authorize(context.Background(), tc.a)
			if err != nil {
				t.Fatal(err)
			}
			if got := d == authorizer.DecisionAllow; got != tc.allow {
				t.Fatalf("allowed = %v, want %v", got, tc.allow)
			}
		})
	}
}
