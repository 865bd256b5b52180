package nodeuser

import (
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
)

func TestNodeName(t *testing.T) {
	for name, tc := range map[string]struct {
		user   user.Info
		node   string
		isNode bool
	}{
		"a node":                    {&user.DefaultInfo{Name: "system:node:n1", Groups: []string{"system:nodes", user.AllAuthenticated}}, "n1", true},
		"system:nodes without name": {&user.DefaultInfo{Name: "x", Groups: []string{"system:nodes"}}, "", true},
		"a node's name, no group":   {&user.DefaultInfo{Name: "system:node:n1"}, "n1", true},
		"a bootstrapper":            {&user.DefaultInfo{Name: "system:bootstrap:abc", Groups: []string{"system:bootstrappers"}}, "", false},
		"system:node: with no name": {&user.DefaultInfo{Name: "system:node:", Groups: []string{"system:nodes"}}, "", true},
	} {
		t.Run(name, func(t *testing.T) {
			got, isNode := NodeName(tc.user)
			if got != tc.node || isNode != tc.isNode {
				t.Fatalf("NodeName = %q, %v; want %q, %v", got, isNode, tc.node, tc.isNode)
			}
		})
	}
}
