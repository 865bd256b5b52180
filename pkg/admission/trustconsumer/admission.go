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
// names beginning with node. are the nodes' alone. Names beginning with
// kube-apiserver-jwt. are those rekey-agent jwt-signer registers for its
// kube-apiserver: such a consumer may name only CAs of purpose
// ServiceAccountTokens, at least one, and registering it or adding a CA
// to it needs verb "create" on certificateauthorities/signjwt of each CA
// added, so that no one without a signer's rights squats a host's name
// (and takes its gate away) or holds a Certificates CA under it.
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

	"rekey.io/rekey/pkg/admission/caauthz"
	"rekey.io/rekey/pkg/admission/rekeyinit"
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

// JWTSignerConsumerPrefix starts the name of the consumer rekey-agent
// jwt-signer registers for its kube-apiserver, kube-apiserver-jwt.<host>
// (pkg/jwtsigner.ConsumerPrefix; a test keeps the two equal); only users
// who may sign with the CAs it names register such names.
const JWTSignerConsumerPrefix = "kube-apiserver-jwt."

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin checks who registers and who reports for a TrustConsumer.
type Plugin struct {
	*admission.Handler
	authorizer authorizer.Authorizer
	// cas reads the purpose of the CAs a jwt-signer's consumer names.
	cas rekeyinit.CertificateAuthorityGetter
}

var (
	_ admission.ValidationInterface         = &Plugin{}
	_ admission.InitializationValidator     = &Plugin{}
	_ genericadmissioninit.WantsAuthorizer  = &Plugin{}
	_ rekeyinit.WantsCertificateAuthorities = &Plugin{}
)

// New returns a plugin that still needs an authorizer.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// SetAuthorizer is called by the admission initializer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authorizer = a }

// SetCertificateAuthorities is called by the rekey initializer.
func (p *Plugin) SetCertificateAuthorities(g rekeyinit.CertificateAuthorityGetter) { p.cas = g }

// ValidateInitialization refuses to start without an authorizer and a
// CertificateAuthority getter.
func (p *Plugin) ValidateInitialization() error {
	if p.authorizer == nil {
		return fmt.Errorf("%s admission plugin requires an authorizer", PluginName)
	}
	if p.cas == nil {
		return fmt.Errorf("%s admission plugin requires a CertificateAuthority getter", PluginName)
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
	jwtSigner := strings.HasPrefix(tc.Name, JWTSignerConsumerPrefix)
	if jwtSigner && a.GetOperation() == admission.Create && len(tc.Spec.CertificateAuthorities) == 0 {
		// Empty, it would hold no rotation but keep the host's signer
		// from registering under its name.
		return admission.NewForbidden(a, fmt.Errorf("trust consumer %q must name at least one CertificateAuthority: names beginning with %q are for rekey-agent jwt-signer, which names the ServiceAccountTokens CA it signs with",
			tc.Name, JWTSignerConsumerPrefix))
	}
	for _, ca := range tc.Spec.CertificateAuthorities {
		if slices.Contains(had, ca) {
			continue // granted when it was added
		}
		if err := p.requireTrust(ctx, a, u, tc.Name, ca); err != nil {
			return err
		}
		if jwtSigner {
			if err := p.requireSigner(ctx, a, u, tc.Name, ca); err != nil {
				return err
			}
		}
	}
	return nil
}

// requireSigner refuses unless u may create certificateauthorities/signjwt
// on the CA and the CA signs service-account tokens: what a
// kube-apiserver-jwt.<host> consumer may name. An authorizer error or a
// CA that cannot be read refuses too.
func (p *Plugin) requireSigner(ctx context.Context, a admission.Attributes, u user.Info, consumer, name string) error {
	decision, err := caauthz.Authorize(ctx, p.authorizer, u, "create", caauthz.SubresourceSignJWT, name)
	if decision != authorizer.DecisionAllow {
		if err != nil {
			klog.FromContext(ctx).Error(err, "Signjwt authorization check failed", "plugin", PluginName, "user", u.GetName(), "certificateAuthority", name)
		}
		return admission.NewForbidden(a, fmt.Errorf("user %q may not register trust consumer %q for CertificateAuthority %q: names beginning with %q are for rekey-agent jwt-signer, and naming a CA in one needs verb \"create\" on \"certificateauthorities/signjwt\" in group %q with resourceName %q",
			u.GetName(), consumer, name, JWTSignerConsumerPrefix, rotation.GroupName, name))
	}
	ca, err := p.cas.Get(ctx, name)
	if err != nil {
		return admission.NewForbidden(a, fmt.Errorf("trust consumer %q may name only CertificateAuthorities of spec.purpose %s (names beginning with %q are for rekey-agent jwt-signer): reading CertificateAuthority %q: %w",
			consumer, rotation.PurposeServiceAccountTokens, JWTSignerConsumerPrefix, name, err))
	}
	if ca.Spec.Purpose != rotation.PurposeServiceAccountTokens {
		return admission.NewForbidden(a, fmt.Errorf("trust consumer %q may name only CertificateAuthorities of spec.purpose %s (names beginning with %q are for rekey-agent jwt-signer); CertificateAuthority %q has spec.purpose %q",
			consumer, rotation.PurposeServiceAccountTokens, JWTSignerConsumerPrefix, name, purposeOf(ca)))
	}
	return nil
}

// purposeOf is the CA's purpose as its default reads (Certificates when
// unset).
func purposeOf(ca *rotation.CertificateAuthority) rotation.CAPurpose {
	if ca.Spec.Purpose == "" {
		return rotation.PurposeCertificates
	}
	return ca.Spec.Purpose
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
	decision, err := caauthz.Authorize(ctx, p.authorizer, u, VerbTrust, "", ca)
	if decision == authorizer.DecisionAllow {
		return nil
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Trust authorization check failed", "plugin", PluginName, "user", u.GetName(), "certificateAuthority", ca)
	}
	return admission.NewForbidden(a, fmt.Errorf("user %q may not register trust consumer %q for CertificateAuthority %q: a consumer holds that CA's rotations until it reports, which needs verb %q on resource \"certificateauthorities\" in group %q with resourceName %q",
		u.GetName(), consumer, ca, VerbTrust, rotation.GroupName, ca))
}
