// Package nodeuser tells a node's identity from a request's user: the
// admission plugins that restrict nodes to their own objects and the
// NodeAttestation challenger share the one rule.
package nodeuser

import (
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
)

const (
	// Group is the group of every node's identity.
	Group = "system:nodes"
	// Prefix starts a node's user name: system:node:<node name>.
	Prefix = "system:node:"
)

// NodeName says whether u is a node's identity and which node: a member of
// system:nodes, or a user named system:node:<name> (either one is treated
// as a node, so that neither half alone escapes a restriction). A node
// identity whose name is not system:node:<name> gets "": it is no node's.
func NodeName(u user.Info) (string, bool) {
	name, prefixed := strings.CutPrefix(u.GetName(), Prefix)
	if !prefixed {
		name = ""
	}
	return name, prefixed || slices.Contains(u.GetGroups(), Group)
}
