// Package signerhostcluster keeps spec.hostCluster of a Signer from
// lending rekey's own permissions in the host cluster.
//
// A Signer with spec.hostCluster makes rekey sign (and, for
// certificateSigningRequests under approval mode NodeClient or
// NodeServing, approve) the host cluster's certificates.k8s.io requests
// for its signer name, with rekey's service account, which holds "sign"
// and "approve" on those signer names in the host cluster. Without this
// check, a user who may write Signers in rekey would borrow those
// permissions: they could have rekey sign kubelet client certificates, or
// pod certificates of a signer name, that the host cluster would never let
// them sign themselves. So, in the host cluster's authorizer (rekey's
// delegated authorizer: kube RBAC), the user needs
//   - verb "sign" on resource "signers" in group certificates.k8s.io,
//     resourceName the signer name or "<domain>/*" (as kube-apiserver asks
//     before a certificates.k8s.io signature), for any spec.hostCluster;
//   - verb "approve" on the same, when spec.hostCluster serves
//     certificateSigningRequests and approval.mode is NodeClient or
//     NodeServing (rekey approves those without a person).
//
// It asks on create, and on every update that changes the spec while
// spec.hostCluster is set: every spec field (policy, approval, the
// hostCluster policy itself) shapes what rekey signs or approves in the
// host cluster, so widening any of them is lending as much as adding the
// field. An update that leaves the spec alone (labels, annotations), or
// that removes spec.hostCluster, needs nothing more.
package signerhostcluster

import (
	"context"
	"errors"
	"fmt"
	"io"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/signerauthz"
)

// PluginName is the name to enable the plugin with.
const PluginName = "SignerHostCluster"

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin checks the host cluster permissions a Signer's spec.hostCluster
// lends.
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

// Validate runs on the main resource of signers; /status is written by
// rekey's controllers only and cannot change the spec.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != certificates.Resource("signers") || a.GetSubresource() != "" {
		return nil
	}
	s, ok := a.GetObject().(*certificates.Signer)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected a Signer, got %T", a.GetObject()))
	}
	if s.Spec.HostCluster == nil {
		return nil
	}
	if a.GetOperation() == admission.Update {
		old, ok := a.GetOldObject().(*certificates.Signer)
		if !ok {
			return admission.NewForbidden(a, fmt.Errorf("expected a Signer as the old object, got %T", a.GetOldObject()))
		}
		if apiequality.Semantic.DeepEqual(old.Spec, s.Spec) {
			return nil
		}
	}
	u := a.GetUserInfo()
	if u == nil {
		return admission.NewForbidden(a, errors.New("no user information on the request"))
	}
	for _, r := range Required(&s.Spec) {
		d := signerauthz.CheckIn(ctx, p.authorizer, signerauthz.HostGroup, u, r.Verb, s.Spec.SignerName)
		if d.Allowed {
			continue
		}
		if d.Err != nil {
			klog.FromContext(ctx).Error(d.Err, "Authorization check failed", "plugin", PluginName, "verb", r.Verb, "signerName", s.Spec.SignerName, "user", u.GetName())
		}
		return admission.NewForbidden(a, forbidden(u, r, s.Spec.SignerName))
	}
	return nil
}

// Requirement is one permission in the host cluster that a Signer's spec
// needs of its author, and the field that needs it.
type Requirement struct {
	Verb  string
	Field string
	Why   string
}

// Required lists what spec needs of its author in the host cluster: sign
// for any spec.hostCluster, and approve when rekey approves its native
// requests without a person.
func Required(spec *certificates.SignerSpec) []Requirement {
	hc := spec.HostCluster
	if hc == nil {
		return nil
	}
	reqs := []Requirement{{Verb: signerauthz.VerbSign, Field: "spec.hostCluster",
		Why: "makes rekey sign the host cluster's certificates.k8s.io requests for the signer name"}}
	if hc.CertificateSigningRequests && (spec.Approval.Mode == certificates.ApprovalNodeClient || spec.Approval.Mode == certificates.ApprovalNodeServing) {
		reqs = append(reqs, Requirement{Verb: signerauthz.VerbApprove, Field: "spec.hostCluster.certificateSigningRequests",
			Why: fmt.Sprintf("with spec.approval.mode %s makes rekey approve the host cluster's CertificateSigningRequests for the signer name", spec.Approval.Mode)})
	}
	return reqs
}

func forbidden(u user.Info, r Requirement, signerName string) error {
	return fmt.Errorf("%s %s with rekey's permission; the user must hold it in the host cluster: %s",
		r.Field, r.Why, signerauthz.ForbiddenMessageIn(signerauthz.HostGroup, u, r.Verb, signerName))
}
