// Package subjectrestriction refuses requests to the kube-apiserver client
// signer for certificates in group system:masters: such a certificate would
// bypass every authorization check in the cluster.
package subjectrestriction

import (
	"context"
	"fmt"
	"io"
	"slices"

	"k8s.io/apiserver/pkg/admission"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apis/certificates/validation"
)

// PluginName is the name to enable the plugin with.
const PluginName = "SubjectRestriction"

// PrivilegedGroup is the group whose members bypass authorization.
const PrivilegedGroup = "system:masters"

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin refuses system:masters client certificate requests.
type Plugin struct {
	*admission.Handler
}

var _ admission.ValidationInterface = &Plugin{}

// New returns the plugin.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create)}
}

// Validate refuses creation of a request to rekey.io/kube-apiserver-client
// whose subject organizations include system:masters.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != certificates.Resource("certificatesigningrequests") || a.GetSubresource() != "" {
		return nil
	}
	csr, ok := a.GetObject().(*certificates.CertificateSigningRequest)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected a CertificateSigningRequest, got %T", a.GetObject()))
	}
	if csr.Spec.SignerName != certificates.KubeAPIServerClientSignerName {
		return nil
	}
	req, err := validation.ParseStoredCSR(csr.Spec.Request)
	if err != nil {
		// Validation, which runs first, has already refused unparseable
		// requests and checked the signature; refuse here too rather than
		// let an unchecked subject through.
		return admission.NewForbidden(a, fmt.Errorf("unable to parse spec.request: %w", err))
	}
	if slices.Contains(req.Subject.Organization, PrivilegedGroup) {
		return admission.NewForbidden(a, fmt.Errorf("use of signer %q with group %q in the subject is not allowed", certificates.KubeAPIServerClientSignerName, PrivilegedGroup))
	}
	return nil
}
