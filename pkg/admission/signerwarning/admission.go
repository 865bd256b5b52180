// Package signerwarning warns, when a request is created, that nothing
// will sign it: no Signer serves its signer name, or the Signer that does
// is not Ready. It never refuses: a signer outside rekey (a controller
// watching the requests and writing status.certificate) needs no Signer
// object, and a Signer that is not Ready may become so.
package signerwarning

import (
	"context"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/admission/rekeyinit"
	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apis/certificates/validation"
)

// PluginName is the name to enable the plugin with.
const PluginName = "SignerWarning"

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin adds a warning to the creates of requests nothing will sign.
type Plugin struct {
	*admission.Handler
	signers rekeyinit.SignerGetter
}

var (
	_ admission.ValidationInterface = &Plugin{}
	_ rekeyinit.WantsSigners        = &Plugin{}
)

// New returns a plugin that still needs a Signer getter.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create)}
}

// SetSigners is called by rekey's admission initializer.
func (p *Plugin) SetSigners(g rekeyinit.SignerGetter) { p.signers = g }

// ValidateInitialization refuses to start without a Signer getter.
func (p *Plugin) ValidateInitialization() error {
	if p.signers == nil {
		return fmt.Errorf("%s admission plugin requires a Signer getter", PluginName)
	}
	return nil
}

// Validate adds the warning, if any, to a create of a request (the main
// resource: the node client subresources create requests for rekey's
// own signer, which is always served).
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != certificates.Resource("certificatesigningrequests") || a.GetSubresource() != "" {
		return nil
	}
	csr, ok := a.GetObject().(*certificates.CertificateSigningRequest)
	if !ok {
		return nil
	}
	if msg := p.Warning(ctx, csr.Spec.SignerName); msg != "" {
		warning.AddWarning(ctx, "", msg)
	}
	return nil
}

// Warning says why nothing will sign a request for signerName, or "".
func (p *Plugin) Warning(ctx context.Context, signerName string) string {
	if signerName == "" {
		return "" // validation refuses it, with the field
	}
	s, err := p.signers.Get(ctx, validation.SignerObjectName(signerName))
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("no Signer serves signerName %q: nothing will sign this request until one does, unless a signer outside rekey serves it (kubectl get rsigner lists rekey's)", signerName)
	case err != nil:
		// A warning is not worth failing or delaying the create for.
		klog.FromContext(ctx).V(2).Info("Not checking the request's Signer", "plugin", PluginName, "signerName", signerName, "err", err)
		return ""
	case s.Spec.SignerName != signerName:
		// Object names map one to one to signer names; a mismatch is a
		// Signer validation would not have stored.
		return ""
	}
	ready := apimeta.FindStatusCondition(s.Status.Conditions, certificates.SignerReady)
	if ready == nil || ready.Status != metav1.ConditionFalse {
		// True, or not judged yet: a new Signer is judged within moments.
		return ""
	}
	// The reason only, never the message: the requester may have no get on
	// Signers, and a message can be the CA's raw error (CAUnavailable
	// carries the key store's text: host paths, PKCS#11 errors). The
	// reasons are the Signer controller's fixed words.
	return fmt.Sprintf("Signer %q for signerName %q is not Ready (reason %s): nothing will sign this request until it is", s.Name, signerName, ready.Reason)
}
