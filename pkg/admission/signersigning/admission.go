// Package signersigning requires verb "sign" on the signer before a
// request's status.certificate can be set.
package signersigning

import (
	"bytes"
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
const PluginName = "SignerSigning"

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin checks sign permission for the request's signer.
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

// Validate refuses a /status update that changes status.certificate unless
// the user may sign for the signer of the stored object.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != certificates.Resource("certificatesigningrequests") || a.GetSubresource() != "status" {
		return nil
	}
	old, ok := a.GetOldObject().(*certificates.CertificateSigningRequest)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected a CertificateSigningRequest as the old object, got %T", a.GetOldObject()))
	}
	csr, ok := a.GetObject().(*certificates.CertificateSigningRequest)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected a CertificateSigningRequest, got %T", a.GetObject()))
	}
	if bytes.Equal(old.Status.Certificate, csr.Status.Certificate) {
		return nil
	}
	return p.Require(ctx, a, signerauthz.VerbSign, old.Spec.SignerName)
}
