// Package signerbinding guards what a Signer object delegates. A Signer
// makes rekey sign, with the key of the CertificateAuthority it names,
// every approved request for its signer name. So creating or changing one
// needs two permissions beyond writing the object:
//   - verb "use" on the CertificateAuthority (resource
//     "certificateauthorities" in group rotation.rekey.io, resourceName the
//     CA's name): otherwise anyone who may create a Signer could point it at
//     a CA that kube-apiserver trusts and mint any identity;
//   - verb "sign" on the signer name (resource "signers" in group
//     certificates.rekey.io, as for signing through /status): otherwise
//     anyone could make rekey sign for a signer name that someone else
//     serves.
//
// Deleting a Signer whose CertificateAuthority publishes ClusterTrustBundles
// makes rekey delete the Signer's ClusterTrustBundle, so it needs delete
// on clustertrustbundles.
package signerbinding

import (
	"context"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/admission/caauthz"
	"rekey.io/rekey/pkg/admission/rekeyinit"
	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/signerauthz"
)

// PluginName is the name to enable the plugin with.
const PluginName = "SignerBinding"

// VerbUse is the verb on a CertificateAuthority that binding a Signer to it
// needs.
const VerbUse = "use"

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin checks the two permissions on create and update of Signers, and
// the one a delete lends.
type Plugin struct {
	*admission.Handler
	authorizer authorizer.Authorizer
	cas        rekeyinit.CertificateAuthorityGetter
}

var (
	_ admission.ValidationInterface         = &Plugin{}
	_ admission.InitializationValidator     = &Plugin{}
	_ genericadmissioninit.WantsAuthorizer  = &Plugin{}
	_ rekeyinit.WantsCertificateAuthorities = &Plugin{}
)

// New returns a plugin that still needs an authorizer.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete)}
}

// SetCertificateAuthorities is called by rekey's admission initializer.
func (p *Plugin) SetCertificateAuthorities(g rekeyinit.CertificateAuthorityGetter) { p.cas = g }

// SetAuthorizer is called by the admission initializer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authorizer = a }

// ValidateInitialization refuses to start without an authorizer.
func (p *Plugin) ValidateInitialization() error {
	if p.authorizer == nil {
		return fmt.Errorf("%s admission plugin requires an authorizer", PluginName)
	}
	if p.cas == nil {
		return fmt.Errorf("%s admission plugin requires a CertificateAuthority getter", PluginName)
	}
	return nil
}

// Validate runs on the main resource of signers; /status is written by
// rekey's controllers only.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != certificates.Resource("signers") || a.GetSubresource() != "" {
		return nil
	}
	u := a.GetUserInfo()
	if u == nil {
		return admission.NewForbidden(a, errors.New("no user information on the request"))
	}
	if a.GetOperation() == admission.Delete {
		return p.validateDelete(ctx, a, u)
	}
	s, ok := a.GetObject().(*certificates.Signer)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected a Signer, got %T", a.GetObject()))
	}
	// The signer name first: it decides what everything else means.
	if d := signerauthz.Check(ctx, p.authorizer, u, signerauthz.VerbSign, s.Spec.SignerName); !d.Allowed {
		p.logError(ctx, d.Err, u.GetName())
		return admission.NewForbidden(a, fmt.Errorf("a Signer makes rekey sign for its signer name: %s", signerauthz.ForbiddenMessage(u, signerauthz.VerbSign, s.Spec.SignerName)))
	}
	caName := s.Spec.CertificateAuthorityRef.Name
	decision, err := caauthz.Authorize(ctx, p.authorizer, u, VerbUse, "", caName)
	if decision != authorizer.DecisionAllow {
		p.logError(ctx, err, u.GetName())
		return admission.NewForbidden(a, fmt.Errorf(
			"user %q may not bind Signer %q to CertificateAuthority %q: needs verb %q on resource %q in group %q with resourceName %q",
			u.GetName(), s.Spec.SignerName, caName, VerbUse, "certificateauthorities", rotation.GroupName, caName))
	}
	return nil
}

func (p *Plugin) logError(ctx context.Context, err error, user string) {
	if err != nil {
		klog.FromContext(ctx).Error(err, "Authorization check failed", "plugin", PluginName, "user", user)
	}
}

// validateDelete: the publisher deletes the ClusterTrustBundle of a Signer
// that is gone, when its CA publishes them; so deleting the Signer needs
// delete on clustertrustbundles, as deleting the bundle would.
func (p *Plugin) validateDelete(ctx context.Context, a admission.Attributes, u user.Info) error {
	s, ok := a.GetOldObject().(*certificates.Signer)
	if !ok {
		return nil // nothing to judge: the registry deletes only what exists
	}
	ca, err := p.cas.Get(ctx, s.Spec.CertificateAuthorityRef.Name)
	if apierrors.IsNotFound(err) {
		return nil // no CA, so nothing published for this Signer
	}
	if err != nil {
		return admission.NewForbidden(a, fmt.Errorf("reading CertificateAuthority %q: %w", s.Spec.CertificateAuthorityRef.Name, err))
	}
	if ca.Spec.Publish == nil || !ca.Spec.Publish.ClusterTrustBundle {
		return nil
	}
	decision, _, err := p.authorizer.Authorize(ctx, authorizer.AttributesRecord{
		User: u, Verb: "delete", APIGroup: "certificates.k8s.io", APIVersion: "*", Resource: "clustertrustbundles", ResourceRequest: true,
	})
	if decision != authorizer.DecisionAllow {
		p.logError(ctx, err, u.GetName())
		return admission.NewForbidden(a, fmt.Errorf(
			"deleting Signer %q makes rekey delete its ClusterTrustBundle (CertificateAuthority %q publishes them); user %q may not do that itself: needs delete on clustertrustbundles",
			s.Spec.SignerName, ca.Name, u.GetName()))
	}
	return nil
}
