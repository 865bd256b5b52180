// Package credentialminter decides who may have rekey mint what through a
// RotatingCredential. rekey mints with its own identity, so the writer of
// the RotatingCredential must hold the permission the credential stands
// for: approve on the signer of a ClientCertificate minter (rekey approves
// the request it makes), create on serviceaccounts/token for the service
// account of a ServiceAccountToken minter, and use on minters "webhook"
// for a Webhook minter (rekey calls the URL from its own network).
package credentialminter

import (
	"context"
	"errors"
	"fmt"
	"io"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/signerauthz"
)

// PluginName is the name to enable the plugin with.
const PluginName = "RotatingCredentialMinter"

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin checks the minter of created and updated RotatingCredentials.
type Plugin struct {
	*admission.Handler
	authz authorizer.Authorizer
}

var _ admission.ValidationInterface = &Plugin{}

// New returns a plugin that still needs an authorizer.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// SetAuthorizer is called by the generic admission initializer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authz = a }

// ValidateInitialization refuses to start without an authorizer.
func (p *Plugin) ValidateInitialization() error {
	if p.authz == nil {
		return fmt.Errorf("%s admission plugin requires an authorizer", PluginName)
	}
	return nil
}

// Validate checks the writer's permission for the minter; an update that
// leaves the minter as it was is not checked again.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != rotation.Resource("rotatingcredentials") || a.GetSubresource() != "" {
		return nil
	}
	rc, ok := a.GetObject().(*rotation.RotatingCredential)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected a RotatingCredential, got %T", a.GetObject()))
	}
	if old, ok := a.GetOldObject().(*rotation.RotatingCredential); ok && apiequality.Semantic.DeepEqual(old.Spec.Minter, rc.Spec.Minter) {
		return nil
	}
	u := a.GetUserInfo()
	if u == nil {
		return admission.NewForbidden(a, errors.New("no user information on the request"))
	}
	m := rc.Spec.Minter
	switch {
	case m.ClientCertificate != nil:
		if d := signerauthz.Check(ctx, p.authz, u, signerauthz.VerbApprove, m.ClientCertificate.SignerName); !d.Allowed {
			p.logErr(ctx, d.Err)
			return admission.NewForbidden(a, fmt.Errorf("a ClientCertificate minter has rekey request and approve certificates for signer %q: %s",
				m.ClientCertificate.SignerName, signerauthz.ForbiddenMessage(u, signerauthz.VerbApprove, m.ClientCertificate.SignerName)))
		}
	case m.ServiceAccountToken != nil:
		sa := m.ServiceAccountToken.ServiceAccountName
		if !p.allowed(ctx, authorizer.AttributesRecord{User: u, Verb: "create", Namespace: a.GetNamespace(), Resource: "serviceaccounts",
			Subresource: "token", Name: sa, APIVersion: "v1", ResourceRequest: true}) {
			return admission.NewForbidden(a, fmt.Errorf("user %q may not create tokens for service account %s/%s (verb create on serviceaccounts/token), which a ServiceAccountToken minter has rekey do",
				u.GetName(), a.GetNamespace(), sa))
		}
	case m.Webhook != nil:
		if !p.allowed(ctx, authorizer.AttributesRecord{User: u, Verb: "use", APIGroup: rotation.GroupName, APIVersion: "*", Resource: "minters", Name: "webhook", ResourceRequest: true}) {
			return admission.NewForbidden(a, fmt.Errorf("user %q may not use Webhook minters: rekey calls the URL from its own network position; needs verb \"use\" on resource \"minters\" in group %q with resourceName \"webhook\"",
				u.GetName(), rotation.GroupName))
		}
	}
	return nil
}

func (p *Plugin) allowed(ctx context.Context, attrs authorizer.AttributesRecord) bool {
	decision, _, err := p.authz.Authorize(ctx, attrs)
	p.logErr(ctx, err)
	return err == nil && decision == authorizer.DecisionAllow
}

func (p *Plugin) logErr(ctx context.Context, err error) {
	if err != nil {
		klog.FromContext(ctx).Error(err, "Authorization check failed", "plugin", PluginName)
	}
}
