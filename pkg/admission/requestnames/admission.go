// Package requestnames reserves the names of the certificate requests
// rekey's controllers make for RotatingCredentials (a ClientCertificate
// minter's "rcred.<namespace>.<name>.g<generation>") to those controllers.
// The names are predictable, and the minter leaves a request of that name
// it did not make alone (it cannot know whose it is): without the
// reservation, anyone who may create requests could plant one and stop
// that credential's rotation for good.
package requestnames

import (
	"context"
	"fmt"
	"io"
	"strings"

	"k8s.io/apiserver/pkg/admission"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/serveridentity"
)

// PluginName is the name to enable the plugin with.
const PluginName = "RotatingCredentialRequestNames"

// Prefix starts the name of every request rekey makes for a
// RotatingCredential.
const Prefix = "rcred."

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin refuses the create of a request named with Prefix by anyone but
// rekey's controllers.
type Plugin struct {
	*admission.Handler
}

var _ admission.ValidationInterface = &Plugin{}

// New returns the plugin.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create)}
}

// Validate checks every create of a request, whichever path (the resource
// or a subresource that creates one). The name checked is the object's, so
// a generateName that expands to a reserved name is refused too. The
// controllers are recognised by the type of the authenticated user, which
// only their in-memory token yields (package serveridentity), never by a
// name or group a client can present.
func (p *Plugin) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != certificates.Resource("certificatesigningrequests") {
		return nil
	}
	csr, ok := a.GetObject().(*certificates.CertificateSigningRequest)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected a CertificateSigningRequest, got %T", a.GetObject()))
	}
	name := csr.Name
	if name == "" {
		name = a.GetName()
	}
	if !strings.HasPrefix(name, Prefix) && !strings.HasPrefix(csr.GenerateName, Prefix) {
		return nil
	}
	if u := a.GetUserInfo(); u != nil && serveridentity.IsController(u) {
		return nil
	}
	return admission.NewForbidden(a, fmt.Errorf("metadata.name: request names starting with %q are reserved for the requests rekey-apiserver's controllers make for RotatingCredentials (ClientCertificate minters); choose another name", Prefix))
}
