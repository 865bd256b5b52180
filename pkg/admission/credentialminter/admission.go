// Package credentialminter decides who may have rekey mint what through a
// RotatingCredential. rekey mints with its own identity, so the writer of
// the RotatingCredential must hold the permission the credential stands
// for: approve on the signer of a ClientCertificate minter (rekey approves
// the request it makes), create on serviceaccounts/token for the service
// account of a ServiceAccountToken minter, and use on minters "webhook"
// for a Webhook minter (rekey calls the URL from its own network).
//
// It also refuses, at create, what would never work and needs a lookup to
// see: a second RotatingCredential keeping its credential in a Secret
// another one already keeps its credential in (they would overwrite each
// other's), and a ClientCertificate minter for a signer name no Signer
// serves (rekey approves its own request and waits for a certificate
// nothing would sign).
package credentialminter

import (
	"context"
	"errors"
	"fmt"
	"io"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/admission/rekeyinit"
	certvalidation "rekey.io/rekey/pkg/apis/certificates/validation"
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
	authz   authorizer.Authorizer
	signers rekeyinit.SignerGetter
	creds   rekeyinit.RotatingCredentialLister
}

var (
	_ admission.ValidationInterface           = &Plugin{}
	_ rekeyinit.WantsSigners                  = &Plugin{}
	_ rekeyinit.WantsRotatingCredentialLister = &Plugin{}
)

// New returns a plugin that still needs an authorizer.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// SetAuthorizer is called by the generic admission initializer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authz = a }

// SetSigners is called by the rekey initializer.
func (p *Plugin) SetSigners(g rekeyinit.SignerGetter) { p.signers = g }

// SetRotatingCredentialLister is called by the rekey initializer.
func (p *Plugin) SetRotatingCredentialLister(l rekeyinit.RotatingCredentialLister) { p.creds = l }

// ValidateInitialization refuses to start without an authorizer, the
// Signer getter and the RotatingCredential lister.
func (p *Plugin) ValidateInitialization() error {
	if p.authz == nil || p.signers == nil || p.creds == nil {
		return fmt.Errorf("%s admission plugin requires an authorizer, a Signer getter and a RotatingCredential lister", PluginName)
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
	if a.GetOperation() == admission.Create {
		// spec.secretRef is immutable: only a create can add a second
		// RotatingCredential on a Secret.
		if err := p.secretTaken(ctx, a, rc); err != nil {
			return err
		}
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
		if err := p.signerServed(ctx, a, m.ClientCertificate.SignerName); err != nil {
			return err
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

// secretTaken refuses rc when another RotatingCredential of its namespace
// keeps its credential in the same Secret. A lookup that fails lets the
// create through: the check spares a person a confusing failure, it guards
// nothing (two creates in the same moment can both pass it).
func (p *Plugin) secretTaken(ctx context.Context, a admission.Attributes, rc *rotation.RotatingCredential) error {
	creds, err := p.creds.List(ctx, a.GetNamespace())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Could not list RotatingCredentials; not checking for another on the same Secret", "plugin", PluginName, "namespace", a.GetNamespace())
		return nil
	}
	for _, other := range creds {
		if other.Name != rc.Name && other.Spec.SecretRef.Name == rc.Spec.SecretRef.Name {
			return apierrors.NewInvalid(rotation.Kind("RotatingCredential"), rc.Name, field.ErrorList{field.Invalid(field.NewPath("spec", "secretRef", "name"), rc.Spec.SecretRef.Name,
				fmt.Sprintf("RotatingCredential %s already keeps its credential in this Secret: two would overwrite each other's; name another Secret", other.Name))})
		}
	}
	return nil
}

// signerServed refuses a ClientCertificate minter for a signer name no
// Signer serves: the request rekey makes would wait for a certificate
// forever. A lookup that fails otherwise lets the write through; the
// credential controller reports the request it cannot get signed.
func (p *Plugin) signerServed(ctx context.Context, a admission.Attributes, signerName string) error {
	_, err := p.signers.Get(ctx, certvalidation.SignerObjectName(signerName))
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return apierrors.NewInvalid(rotation.Kind("RotatingCredential"), a.GetName(), field.ErrorList{field.Invalid(field.NewPath("spec", "minter", "clientCertificate", "signerName"), signerName,
			fmt.Sprintf("no Signer serves this signer name (no Signer %q): create the Signer first; kubectl get signers lists those there are", certvalidation.SignerObjectName(signerName)))})
	default:
		klog.FromContext(ctx).Error(err, "Could not read the Signer; not checking that one serves the minter's signer name", "plugin", PluginName, "signerName", signerName)
		return nil
	}
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
