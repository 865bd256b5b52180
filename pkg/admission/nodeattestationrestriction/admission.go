// Package nodeattestationrestriction keeps each node to its own
// NodeAttestation, as kube-apiserver's NodeRestriction keeps a node to its
// own Node. The rekey:tpm-node role is bound to all of system:nodes (a
// node renews with its own certificate), so RBAC alone would let any node
// replace another's EK and AK, ask for its challenges (each replacing the
// outstanding one) or delete it: a node may write, challenge or delete only
// the NodeAttestation named after itself. Other identities (bootstrap
// credentials, administrators) are left to RBAC.
package nodeattestationrestriction

import (
	"context"
	"fmt"
	"io"
	"strings"

	"k8s.io/apiserver/pkg/admission"

	"rekey.io/rekey/pkg/apis/attestation"
	"rekey.io/rekey/pkg/nodeuser"
)

// PluginName is the name to enable the plugin with.
const PluginName = "NodeAttestationRestriction"

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin refuses a node's write of another node's NodeAttestation.
type Plugin struct {
	*admission.Handler
}

var _ admission.ValidationInterface = &Plugin{}

// New returns the plugin.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete)}
}

// Validate refuses a node's create, update, challenge or delete of a
// NodeAttestation not named after it.
func (p *Plugin) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != attestation.Resource("nodeattestations") {
		return nil
	}
	u := a.GetUserInfo()
	if u == nil {
		return admission.NewForbidden(a, fmt.Errorf("no user information on the request"))
	}
	node, isNode := nodeuser.NodeName(u)
	if !isNode {
		return nil
	}
	target := a.GetName()
	if target == "" && a.GetOperation() == admission.Create && a.GetSubresource() == "" {
		if n, ok := a.GetObject().(*attestation.NodeAttestation); ok {
			target = n.Name
		}
	}
	if node == "" || target != node {
		return admission.NewForbidden(a, fmt.Errorf("node %q may %s only its own NodeAttestation (named after the node), not %q",
			u.GetName(), verb(a), target))
	}
	return nil
}

func verb(a admission.Attributes) string {
	switch {
	case a.GetSubresource() != "":
		return strings.ToLower(string(a.GetOperation())) + " " + a.GetSubresource() + " of"
	default:
		return strings.ToLower(string(a.GetOperation()))
	}
}
