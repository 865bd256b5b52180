// Package signerrevocation requires verb "revoke" on the signer before a
// Revocation is created. The signer is the one the storage found in the
// issuance records and put into status.signerName before the generic
// create, which is where validating admission runs: never one the client
// named.
package signerrevocation

import (
	"context"
	"errors"
	"fmt"
	"io"

	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/admission/signerauth"
	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/serveridentity"
	"rekey.io/rekey/pkg/signerauthz"
)

// PluginName is the name to enable the plugin with.
const PluginName = "SignerRevocation"

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin checks revoke permission for the revoked certificate's signer.
type Plugin struct {
	signerauth.Authorizing
}

var (
	_ admission.ValidationInterface        = &Plugin{}
	_ admission.InitializationValidator    = &Plugin{}
	_ genericadmissioninit.WantsAuthorizer = &Plugin{}
)

// New returns a plugin, for creates, that still needs an authorizer.
func New() *Plugin {
	p := &Plugin{Authorizing: signerauth.NewAuthorizing(PluginName)}
	p.Handler = admission.NewHandler(admission.Create)
	return p
}

// Validate refuses to create a Revocation unless the user may revoke for
// the signer that issued the certificate (status.signerName, set by the
// storage). rekey's controllers revoke what they minted (RotatingCredential)
// without a grant.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != certificates.Resource("revocations") || a.GetSubresource() != "" || a.GetOperation() != admission.Create {
		return nil
	}
	rev, ok := a.GetObject().(*certificates.Revocation)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected a Revocation, got %T", a.GetObject()))
	}
	u := a.GetUserInfo()
	if u == nil {
		return admission.NewForbidden(a, errors.New("no user information on the request"))
	}
	if serveridentity.IsController(u) {
		return nil
	}
	signer := rev.Status.SignerName
	if signer == "" {
		// The storage resolves it before this runs; without it there is
		// nothing to authorize against.
		return admission.NewForbidden(a, errors.New("the revoked certificate's signer was not resolved"))
	}
	d := signerauthz.Check(ctx, p.Authorizer, u, signerauthz.VerbRevoke, signer)
	if d.Allowed {
		return nil
	}
	if d.Err != nil {
		klog.FromContext(ctx).Error(d.Err, "Signer authorization check failed", "plugin", PluginName, "verb", signerauthz.VerbRevoke, "signerName", signer, "user", u.GetName())
	}
	return admission.NewForbidden(a, errors.New(ForbiddenMessage(u.GetName(), signer)))
}

// ForbiddenMessage names what the user lacks, so that an operator can
// write the missing RBAC rule from the error alone.
func ForbiddenMessage(user, signerName string) string {
	names := fmt.Sprintf("%q", signerName)
	if domain, _, ok := cut(signerName); ok {
		names += fmt.Sprintf(" or %q", domain+"/*")
	}
	return fmt.Sprintf("user %q may not revoke certificates of signer %q: needs verb %q on resource %q in group %q with resourceName %s",
		user, signerName, signerauthz.VerbRevoke, signerauthz.Resource, signerauthz.Group, names)
}

func cut(signerName string) (string, string, bool) {
	for i := 0; i < len(signerName); i++ {
		if signerName[i] == '/' {
			return signerName[:i], signerName[i+1:], i > 0
		}
	}
	return "", "", false
}
