// Package trustconsumer guards TrustConsumers, which hold a CA's rotation
// in Preparing (the old CA signing) until they report holding the new CA.
// Registering one is therefore a say over every rotation of the CAs it
// names: creating a consumer, or adding a CA to one, needs the verb
// "trust" on each CertificateAuthority added (resource
// certificateauthorities, group rotation.rekey.io, the CA's name), beside
// RBAC on trustconsumers. And a report is worth only as much as who makes
// it: every update of a consumer, of spec or of status, by update or
// patch, must come from the user that registered it (spec.reporter), so
// that no one can report on another consumer's behalf. Delete is left to
// RBAC: removing a consumer that is gone is an operator's job. A node
// (system:node:NAME, or any member of system:nodes) may register and report
// only for the consumer named node.NAME: one per node, never another's;
// names beginning with node. are the nodes' alone.
package trustconsumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/nodeuser"
)

// PluginName is the name to enable the plugin with.
const PluginName = "TrustConsumer"

// VerbTrust is the verb on a CertificateAuthority that registering a
// consumer of it needs.
const VerbTrust = "trust"

// NodeConsumerPrefix starts the name of a node's trust consumer,
// node.<node name>; only nodes register such names.
const NodeConsumerPrefix = "node."

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin checks who registers and who reports for a TrustConsumer.
type Plugin struct {
	*admission.Handler
	authorizer authorizer.Authorizer
}

var (
	_ admission.ValidationInterface        = &Plugin{}
	_ admission.InitializationValidator    = &Plugin{}
	_ genericadmissioninit.WantsAuthorizer = &Plugin{}
)

// New returns a plugin that still needs an authorizer.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// SetAuthorizer is called by the admission initializer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authorizer = a }

// ValidateInitialization refuses to start without an authorizer.
func (p *Plugin) ValidateInitialization() error {
	if p.authorizer == nil {
		return fmt.Errorf("%s admission plugin requires an authorizer", PluginName)
	}
	return nil
}

// Validate checks a create or update of trustconsumers or
// trustconsumers/status.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != rotation.Resource("trustconsumers") {
		return nil
	}
	sub := a.GetSubresource()
	if sub != "" && sub != "status" {
		return nil
	}
	tc, ok := a.GetObject().(*rotation.TrustConsumer)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected a TrustConsumer, got %T", a.GetObject()))
	}
	u := a.GetUserInfo()
	if u == nil {
		return admission.NewForbidden(a, errors.New("no user information on the request"))
	}
	// A node registers and reports for one consumer, node.<its name> (its
	// kubelet's client-CA file): a node holding the trust verb may not
	// take another consumer's name (and report the new CA in its stead),
	// nor register consumers without end to hold rotations. The prefix
	// is the nodes' alone, so that a node whose name is another
	// consumer's (a bootstrap token can get a certificate for any node
	// name) still cannot take that consumer, and no one else takes a
	// node's.
	node, isNode := nodeuser.NodeName(u)
	if isNode && (node == "" || tc.Name != NodeConsumerPrefix+node) {
		return admission.NewForbidden(a, fmt.Errorf("node %q may only register and report for the trust consumer %q", u.GetName(), NodeConsumerPrefix+node))
	}
	if !isNode && strings.HasPrefix(tc.Name, NodeConsumerPrefix) && a.GetOperation() == admission.Create {
		return admission.NewForbidden(a, fmt.Errorf("trust consumer names beginning with %q are for nodes (node %s registers %s<name>); user %q is not a node",
			NodeConsumerPrefix, "<name>", NodeConsumerPrefix, u.GetName()))
	}
	var had []string
	if a.GetOperation() == admission.Update {
		old, ok := a.GetOldObject().(*rotation.TrustConsumer)
		if !ok {
			return admission.NewForbidden(a, fmt.Errorf("expected the stored TrustConsumer, got %T", a.GetOldObject()))
		}
		if u.GetName() != old.Spec.Reporter && !finishingDeletion(tc, old, sub) {
			return admission.NewForbidden(a, fmt.Errorf("only %q, which registered trust consumer %q, may report for it or change it (user %q may only delete it)",
				old.Spec.Reporter, old.Name, u.GetName()))
		}
		if sub == "status" {
			return nil
		}
		had = old.Spec.CertificateAuthorities
	}
	for _, ca := range tc.Spec.CertificateAuthorities {
		if slices.Contains(had, ca) {
			continue // granted when it was added
		}
		if err := p.requireTrust(ctx, a, u, tc.Name, ca); err != nil {
			return err
		}
	}
	return nil
}

// finishingDeletion allows anyone with RBAC to update to take finalizers
// off a consumer already being deleted and nothing else: that is part of
// the delete, which RBAC alone governs, and otherwise a consumer whose
// reporter is gone could not be removed if it carried a finalizer.
func finishingDeletion(tc, old *rotation.TrustConsumer, sub string) bool {
	if sub != "" || old.DeletionTimestamp == nil || len(tc.Finalizers) >= len(old.Finalizers) {
		return false
	}
	if !apiequality.Semantic.DeepEqual(tc.Spec, old.Spec) || !apiequality.Semantic.DeepEqual(tc.Status, old.Status) {
		return false
	}
	for _, f := range tc.Finalizers {
		if !slices.Contains(old.Finalizers, f) {
			return false
		}
	}
	a, b := tc.ObjectMeta.DeepCopy(), old.ObjectMeta.DeepCopy()
	a.Finalizers, b.Finalizers = nil, nil
	a.ManagedFields, b.ManagedFields = nil, nil
	a.ResourceVersion, b.ResourceVersion = "", ""
	return apiequality.Semantic.DeepEqual(a, b)
}

// requireTrust refuses unless u may "trust" the CA. An authorizer error
// refuses too: a consumer holds rotations, so it is never let through on
// a failed check.
func (p *Plugin) requireTrust(ctx context.Context, a admission.Attributes, u user.Info, consumer, ca string) error {
	decision, _, err := p.authorizer.Authorize(ctx, authorizer.AttributesRecord{
		User:            u,
		Verb:            VerbTrust,
		APIGroup:        rotation.GroupName,
		APIVersion:      "*",
		Resource:        "certificateauthorities",
		Name:            ca,
		ResourceRequest: true,
	})
	if decision == authorizer.DecisionAllow {
		return nil
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Trust authorization check failed", "plugin", PluginName, "user", u.GetName(), "certificateAuthority", ca)
	}
	return admission.NewForbidden(a, fmt.Errorf("user %q may not register trust consumer %q for CertificateAuthority %q: a consumer holds that CA's rotations until it reports, which needs verb %q on resource \"certificateauthorities\" in group %q with resourceName %q",
		u.GetName(), consumer, ca, VerbTrust, rotation.GroupName, ca))
}
