// Package signerapproval requires verb "approve" on the signer before a
// request's /approval subresource can be written.
package signerapproval

import (
	"context"
	"fmt"
	"io"

	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"

	"rekey.io/rekey/pkg/admission/signerauth"
	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/signerauthz"
)

// PluginName is the name to enable the plugin with.
const PluginName = "SignerApproval"

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin checks approve permission for the request's signer.
type Plugin struct {
	signerauth.Authorizing
}

var (
	_ admission.ValidationInterface        = &Plugin{}
	_ admission.InitializationValidator    = &Plugin{}
	_ genericadmissioninit.WantsAuthorizer = &Plugin{}
)

// New returns a plugin that still needs an authorizer.
func New() *Plugin {
	return &Plugin{Authorizing: signerauth.NewAuthorizing(PluginName)}
}

// Validate refuses an /approval update unless the user may approve for the
// signer named by the stored object: the old object, since spec is
// immutable and the body's copy is not to be trusted.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != certificates.Resource("certificatesigningrequests") || a.GetSubresource() != "approval" {
		return nil
	}
	old, ok := a.GetOldObject().(*certificates.CertificateSigningRequest)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected a CertificateSigningRequest as the old object, got %T", a.GetOldObject()))
	}
	return p.Require(ctx, a, signerauthz.VerbApprove, old.Spec.SignerName)
}
