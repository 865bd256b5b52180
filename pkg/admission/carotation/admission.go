// Package carotation enforces the phases of a rotation on the rotate
// subresource of CertificateAuthorities (Start only from "" or Completed,
// Prepare, always forced, only in Preparing, Complete only from Prepared
// and, unless forced, only when every
// certificate of the previous CA was renewed, or for a ServiceAccountTokens
// CA every token of the previous key expired) and of RotatingCredentials
// (Start except while a grace period runs, Complete only then). A refused action is a 409
// Conflict whose message names the current phase and what it allows.
package carotation

import (
	"context"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/admission/rekeyinit"
	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/apis/rotation/validation"
)

// PluginName is the name to enable the plugin with.
const PluginName = "CertificateAuthorityRotation"

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin checks rotations.
type Plugin struct {
	*admission.Handler
	cas   rekeyinit.CertificateAuthorityGetter
	creds rekeyinit.RotatingCredentialGetter
	// clock says whether a ServiceAccountTokens CA's previous tokens have
	// expired.
	clock clock.PassiveClock
}

var (
	_ admission.ValidationInterface         = &Plugin{}
	_ rekeyinit.WantsCertificateAuthorities = &Plugin{}
	_ rekeyinit.WantsRotatingCredentials    = &Plugin{}
)

// New returns a plugin that still needs a CertificateAuthority getter.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create), clock: clock.RealClock{}}
}

// SetCertificateAuthorities is called by the rekey initializer.
func (p *Plugin) SetCertificateAuthorities(g rekeyinit.CertificateAuthorityGetter) { p.cas = g }

// SetRotatingCredentials is called by the rekey initializer.
func (p *Plugin) SetRotatingCredentials(g rekeyinit.RotatingCredentialGetter) { p.creds = g }

// ValidateInitialization refuses to start without the getters.
func (p *Plugin) ValidateInitialization() error {
	if p.cas == nil || p.creds == nil {
		return fmt.Errorf("%s admission plugin requires CertificateAuthority and RotatingCredential getters", PluginName)
	}
	return nil
}

// Validate checks a Rotation posted to certificateauthorities/NAME/rotate
// or rotatingcredentials/NAME/rotate.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "rotate" {
		return nil
	}
	isCA := a.GetResource().GroupResource() == rotation.Resource("certificateauthorities")
	if !isCA && a.GetResource().GroupResource() != rotation.Resource("rotatingcredentials") {
		return nil
	}
	r, ok := a.GetObject().(*rotation.Rotation)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected a Rotation, got %T", a.GetObject()))
	}
	if errs := validation.ValidateRotation(r); len(errs) > 0 {
		return apierrors.NewInvalid(rotation.Kind("Rotation"), a.GetName(), errs)
	}
	if !isCA {
		rc, err := p.creds.Get(ctx, a.GetNamespace(), a.GetName())
		if err != nil {
			return readError(a, "RotatingCredential", err)
		}
		if err := validation.CheckCredentialTransition(rc, r); err != nil {
			return apierrors.NewConflict(rotation.Resource("rotatingcredentials"), a.GetName(), err)
		}
		return nil
	}
	ca, err := p.cas.Get(ctx, a.GetName())
	if err != nil {
		return readError(a, "CertificateAuthority", err)
	}
	if err := validation.CheckTransition(ca, r, p.clock.Now()); err != nil {
		return apierrors.NewConflict(rotation.Resource("certificateauthorities"), a.GetName(), err)
	}
	return nil
}

// readError passes an API status through (a 404 stays a 404) and turns
// anything else into a refusal naming what could not be read.
func readError(a admission.Attributes, kind string, err error) error {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return err
	}
	return admission.NewForbidden(a, fmt.Errorf("reading %s %q: %w", kind, a.GetName(), err))
}
