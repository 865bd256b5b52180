// Package signerauth is the shared base of the SignerApproval and
// SignerSigning admission plugins; the signer check itself is
// rekey.io/rekey/pkg/signerauthz.
package signerauth

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/signerauthz"
)

// Authorizing is the shared part of the SignerApproval and SignerSigning
// plugins: the authorizer they are initialized with and the check itself.
type Authorizing struct {
	*admission.Handler
	Authorizer authorizer.Authorizer
	name       string
}

// NewAuthorizing returns a handler for update operations.
func NewAuthorizing(pluginName string) Authorizing {
	return Authorizing{Handler: admission.NewHandler(admission.Update), name: pluginName}
}

// SetAuthorizer is called by the admission initializer.
func (p *Authorizing) SetAuthorizer(authz authorizer.Authorizer) { p.Authorizer = authz }

// ValidateInitialization refuses to start without an authorizer: without it
// every check would have to fail open or closed silently.
func (p *Authorizing) ValidateInitialization() error {
	if p.Authorizer == nil {
		return fmt.Errorf("%s admission plugin requires an authorizer", p.name)
	}
	return nil
}

// Require returns a Forbidden admission error unless the request's user may
// perform verb for signerName.
func (p *Authorizing) Require(ctx context.Context, a admission.Attributes, verb, signerName string) error {
	u := a.GetUserInfo()
	if u == nil {
		return admission.NewForbidden(a, errors.New("no user information on the request"))
	}
	d := signerauthz.Check(ctx, p.Authorizer, u, verb, signerName)
	if d.Allowed {
		return nil
	}
	if d.Err != nil {
		klog.FromContext(ctx).Error(d.Err, "Signer authorization check failed", "plugin", p.name, "verb", verb, "signerName", signerName, "user", u.GetName())
	}
	return admission.NewForbidden(a, errors.New(signerauthz.ForbiddenMessage(u, verb, signerName)))
}
