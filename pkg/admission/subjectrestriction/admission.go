// Package subjectrestriction refuses requests for client certificates in
// group system:masters: such a certificate bypasses every authorization
// check of any cluster whose kube-apiserver trusts the CA that signs it.
//
// rekey cannot know which of its CAs (or an external signer's) a
// kube-apiserver trusts: that is the cluster's --client-ca-file. So the
// restriction applies to every signer name, whenever the certificate could
// authenticate a client (policy.ClientAuthUsable). The signer applies the
// same rule again when it signs (policy.Evaluate).
package subjectrestriction

import (
	"context"
	"fmt"
	"io"

	"k8s.io/apiserver/pkg/admission"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/policy"
)

// PluginName is the name to enable the plugin with.
const PluginName = "SubjectRestriction"

// PrivilegedGroup is the group whose members bypass authorization.
const PrivilegedGroup = policy.PrivilegedGroup

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

// Validate refuses creation of a request whose certificate could
// authenticate a client and whose subject organizations include
// system:masters, whatever its signer.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	// Every create of a request, whichever path (the main resource, or
	// the selfnodeclient and nodeclient subresources, which create too).
	if a.GetResource().GroupResource() != certificates.Resource("certificatesigningrequests") {
		return nil
	}
	csr, ok := a.GetObject().(*certificates.CertificateSigningRequest)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected a CertificateSigningRequest, got %T", a.GetObject()))
	}
	usages := make([]string, len(csr.Spec.Usages))
	for i, u := range csr.Spec.Usages {
		usages[i] = string(u)
	}
	if !policy.ClientAuthUsable(usages) {
		return nil
	}
	req, err := validation.ParseStoredCSR(csr.Spec.Request)
	if err != nil {
		// Validation, which runs first, has already refused unparseable
		// requests and checked the signature; refuse here too rather than
		// let an unchecked subject through.
		return admission.NewForbidden(a, fmt.Errorf("unable to parse spec.request: %w", err))
	}
	if policy.NamesPrivilegedGroup(req.Subject.Organization) {
		return admission.NewForbidden(a, fmt.Errorf("a certificate usable for client authentication may not name group %q in its subject, for any signer (signer %q)",
			PrivilegedGroup, csr.Spec.SignerName))
	}
	return nil
}
